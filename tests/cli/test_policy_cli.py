"""`parkgate policy check` / `policy schema`, and start-up refusing an invalid
Cedar policy: file and line, one line, exit 2, never a traceback (issue 39)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from tests.cli.conftest import parkgate_argv

runner = CliRunner()

GOOD = """
@id("prod-kubectl")
@approvers("group:oncall")
@quorum("2")
permit(principal in Parkgate::Project::"prod", action == Parkgate::Action::"call",
       resource == Parkgate::Tool::"shell")
when { context.programs.contains("kubectl") };

@id("bash-rm")
forbid(principal, action, resource == Parkgate::Tool::"Bash")
when { context.programs.contains("rm") && !context.inside_workspace };
"""

TYPO = """
@id("reads")
@mode("auto")
permit(principal, action, resource)
when {
  resource.side_effects == "read" &&
  context.inside_workspce
};
"""

CONFIG = "approvers:\n  alice: {}\n  bob: {}\napprover_groups:\n  oncall: [alice, bob]\n"


def config(tmp_path: Path, *policies: Path) -> Path:
    path = tmp_path / "server.yaml"
    files = "".join(f"  - {p}\n" for p in policies)
    path.write_text(CONFIG + (f"policy_files:\n{files}" if policies else ""))
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_check_passes_a_valid_policy(cli_env: dict[str, str], tmp_path: Path) -> None:
    good = write(tmp_path, "good.cedar", GOOD)
    result = runner.invoke(app, ["--config", str(config(tmp_path, good)), "policy", "check"])
    assert result.exit_code == 0, result.output
    assert "policies OK: 2 in 1 file(s)" in result.stdout


def test_check_names_each_problem_with_file_and_line(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    good = write(tmp_path, "good.cedar", GOOD)
    typo = write(tmp_path, "typo.cedar", TYPO)
    result = runner.invoke(app, ["--config", str(config(tmp_path)), "policy", "check",
                                 str(good), str(typo)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"{typo}:7: [reads] attribute `inside_workspce`"), lines
    assert lines[-1] == "parkgate: error: 1 problem(s) in 2 policy file(s)"


def test_a_file_that_does_not_parse_is_one_line(cli_env: dict[str, str], tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.cedar", GOOD + "\npermit(principal, action, resource) when {\n")
    result = runner.invoke(app, ["--config", str(config(tmp_path)), "policy", "check", str(bad)])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"parkgate: error: {bad}:13: "), line


def test_schema_prints_the_deployments_request_model(cli_env: dict[str, str]) -> None:
    result = runner.invoke(app, ["policy", "schema"])
    assert result.exit_code == 0, result.output
    assert "namespace Parkgate {" in result.stdout
    assert "entity Agent in [Project];" in result.stdout
    assert '"command"?: String' in result.stdout and '"file_path"?: String' in result.stdout
    assert "programs: Set<String>" in result.stdout


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_start_up_refuses_an_invalid_policy(
        cli_env: dict[str, str], tmp_path: Path, command: str) -> None:
    typo = write(tmp_path, "typo.cedar", TYPO)
    proc = subprocess.run([*parkgate_argv(), "--config", str(config(tmp_path, typo)), command],
                          env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"parkgate: error: invalid Cedar policy: {typo}:7: [reads] attribute "
                     "`inside_workspce` in context for Parkgate::Action::\"call\" not found"], lines
    assert "Traceback" not in proc.stderr


CASES = """
cases:
  - name: prod kubectl
    tool: shell
    input: {command: "/usr/bin/kubectl get pods"}
    key: deployer
    project: prod
    expect: prompt
    rule: cedar:prod-kubectl
    approvers: [alice, bob]
    quorum: 2
  - name: dev kubectl
    tool: shell
    input: {command: "kubectl get pods"}
    project: dev
    expect: prompt
    rule: default.EXECUTE=prompt
  - name: rm outside the workspace
    tool: Bash
    input: {command: "rm -rf /tmp/x"}
    expect: deny
    rule: cedar:bash-rm
"""


def test_policy_test_passes_when_every_case_gets_its_mode(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    good = write(tmp_path, "good.cedar", GOOD)
    cases = write(tmp_path, "cases.yaml", CASES)
    result = runner.invoke(app, ["--config", str(config(tmp_path, good)), "policy", "test",
                                 str(cases)])
    assert result.exit_code == 0, result.output
    assert "all 3 case(s) get the expected mode" in result.stdout


def test_policy_test_exits_1_with_a_table_of_mismatches(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    good = write(tmp_path, "good.cedar", GOOD)
    wrong = CASES.replace("quorum: 2", "quorum: 1").replace(
        "expect: prompt\n    rule: default", "expect: auto\n    rule: default")
    cases = write(tmp_path, "cases.yaml", wrong)
    result = runner.invoke(app, ["--config", str(config(tmp_path, good)), "policy", "test",
                                 str(cases)])
    assert result.exit_code == 1, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 2, result.stdout
    assert "prod kubectl" in rows[0] and "quorum 2" in rows[0]
    assert "dev kubectl" in rows[1] and "auto" in rows[1] and "prompt" in rows[1]
    assert result.stderr.strip() == "parkgate: error: 2 of 3 case(s) do not get the expected mode"


def test_policy_test_refuses_a_malformed_cases_file(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    cases = write(tmp_path, "cases.yaml", "cases:\n  - tool: shell\n    expect: maybe\n")
    result = runner.invoke(app, ["policy", "test", str(cases)])
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"parkgate: error: {cases}: ") and "expect" in line
