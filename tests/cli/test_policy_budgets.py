"""Budgets in the policy tools and at start-up (issue 39, part 4): `policy test`
cases carry budget state and show it; `policy check` and `policy schema` know
`context.budgets`; a bad budget setting stops `parkgate serve` with one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from tests.cli.conftest import parkgate_argv

runner = CliRunner()

BUDGETS = ("tool_confirmation: {default: {EXECUTE: auto}}\n"
           "budgets:\n  ops: {limit: 3, per: project, window: 1d, tools: [shell]}\n"
           "  spend: {limit: 100, window: 1d, counts: input.timeout, on_exceed: deny,"
           " tools: [Bash]}\n")

LOW = """
@id("ops-low")
@mode("prompt")
permit(principal, action, resource)
when { context.budgets.ops.remaining < 2 };
"""

CASES = """
cases:
  - name: room left
    tool: shell
    input: {command: ls}
    budgets: {ops: 0}
    expect: auto
  - name: the policy sees the budget
    tool: shell
    input: {command: ls}
    budgets: {ops: 2}
    expect: prompt
    rule: cedar:ops-low
  - name: at the cap
    tool: shell
    input: {command: ls}
    budgets: {ops: 3}
    expect: prompt
    rule: "budget:ops over its limit: 3 of 3 used, this call needs 1"
  - name: a deny budget
    tool: Bash
    input: {command: ls, timeout: 30}
    budgets: {spend: 80}
    expect: deny
    rule: budget:spend
"""


def _config(tmp_path: Path, extra: str = "") -> Path:
    policy = tmp_path / "low.cedar"
    policy.write_text(LOW)
    path = tmp_path / "server.yaml"
    path.write_text(BUDGETS + f"policy_files: [{policy}]\n" + extra)
    return path


def test_policy_test_classifies_with_the_cases_budget_state(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(CASES)
    result = runner.invoke(app, ["--config", str(_config(tmp_path)), "policy", "test",
                                 str(cases)])
    assert result.exit_code == 0, result.output
    assert "all 4 case(s) get the expected mode" in result.stdout
    assert "ops 3 of 3 used +1" in result.stdout  # the state each case ran with
    # A case expecting a run at the cap is a mismatch, shown with its state.
    cases.write_text(CASES.replace("budgets: {ops: 3}\n    expect: prompt",
                                   "budgets: {ops: 3}\n    expect: auto"))
    result = runner.invoke(app, ["--config", str(_config(tmp_path)), "policy", "test",
                                 str(cases)])
    assert result.exit_code == 1, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert any("at the cap" in r and "ops 3 of 3" in r for r in rows), result.stdout


def test_policy_test_refuses_a_budget_the_settings_do_not_have(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("cases:\n  - {tool: shell, input: {command: ls}, budgets: {opz: 1},"
                     " expect: auto}\n")
    result = runner.invoke(app, ["--config", str(_config(tmp_path)), "policy", "test",
                                 str(cases)])
    assert result.exit_code == 2
    assert "unknown budget 'opz' (the settings' budgets: ops, spend)" in result.output


def test_schema_and_check_know_the_budgets(cli_env: dict[str, str], tmp_path: Path) -> None:
    config = _config(tmp_path)
    schema = runner.invoke(app, ["--config", str(config), "policy", "schema"])
    assert schema.exit_code == 0, schema.output
    assert '"ops": { used: Long, limit: Long, remaining: Long }' in schema.stdout
    typo = tmp_path / "typo.cedar"
    typo.write_text(LOW.replace("budgets.ops", "budgets.opz").replace("ops-low", "t"))
    result = runner.invoke(app, ["--config", str(config), "policy", "check", str(typo)])
    assert result.exit_code == 2
    assert f"{typo}:5: [t] attribute `budgets.opz`" in result.output


@pytest.mark.parametrize(("setting", "line"), [
    ("budgets: {ops: {limit: 3, window: 1y}}",
     "budgets.ops.window: Value error, window '1y': use a number and one of s, m, h, d, w"),
    ("budgets: {ops: {limit: 3, tools: [shel]}}",
     "invalid budget: budgets.ops.tools: unknown tool 'shel'"),
    ("budgets: {ops: {limit: 3, on_exceed: warn}}", "budgets.ops.on_exceed"),
    ("budgets: {'two words': {limit: 3}}", "'two words' is not a budget name"),
])
def test_serve_refuses_a_bad_budget_in_one_line(
        cli_env: dict[str, str], tmp_path: Path, setting: str, line: str) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(setting + "\n")
    proc = subprocess.run([*parkgate_argv(), "--config", str(config), "serve"],
                          env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [text for text in proc.stderr.splitlines() if text.strip()]
    assert len(lines) == 1 and line in lines[0], lines
    assert "Traceback" not in proc.stderr
