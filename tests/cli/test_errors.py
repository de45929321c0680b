"""Every bad argument or configuration: one line on stderr, exit code 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from tests.cli.conftest import parkgate_argv

runner = CliRunner()


def _one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("parkgate: error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["no-such-command"], "No such command"),
        (["config", "check", "--bogus"], "No such option: --bogus"),
        (["--config", "/nonexistent/parkgate.yaml", "config", "check"], "config file not found"),
    ],
)
def test_bad_argument_is_one_line_and_exit_2(
    cli_env: dict[str, str], argv: list[str], needle: str
) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert needle in _one_line_error(result.stderr)


def test_bad_argument_as_a_real_process(cli_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*parkgate_argv(), "tools", "list", "--nope"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "No such option: --nope" in _one_line_error(proc.stderr)
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("api_port: eighty\n", "api_port: Input should be a valid integer"),
        ("api_port: [\n", "invalid YAML"),
        ("no_such_setting: 1\n", "no_such_setting: Extra inputs are not permitted"),
        ("tool_confirmation:\n  default:\n    WRITE: maybe\n", "tool_confirmation.default"),
        ("tool_confirmation:\n  default:\n    SOMETIMES: auto\n", "unknown side-effect class"),
        ("public_base_url: ftp://x\n", "public_base_url"),
        ("approval_expiry_seconds: -5\n", "approval_expiry_seconds: Input should be greater"),
        ("default_timeout_seconds: 0\n", "default_timeout_seconds: Input should be greater"),
        ("execute_timeout_seconds: -1\n", "execute_timeout_seconds"),
        ("cancel_grace_seconds: -1\n", "cancel_grace_seconds"),
        ("max_input_bytes: -1\n", "max_input_bytes"),
        ("max_request_bytes: 0\n", "max_request_bytes"),
        ("max_input_depth: 0\n", "max_input_depth"),
        ("api_port: 70000\n", "api_port"),
        ("stuck_task_failures: 1\n", "stuck_task_failures: Input should be greater"),
        ("stuck_task_check_seconds: -1\n", "stuck_task_check_seconds"),
        ("approval_expiry_by_class:\n  writes: 60\n", "approval_expiry_by_class: Value error, "
         "unknown side-effect class 'writes'"),
        ("approval_expiry_by_class:\n  write: -1\n", "approval_expiry_by_class"),
    ],
)
def test_bad_config_file_is_one_line_and_exit_2(
    cli_env: dict[str, str], tmp_path: Path, yaml_text: str, needle: str
) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(yaml_text)
    result = runner.invoke(app, ["--config", str(path), "config", "check"])
    assert result.exit_code == 2, result.output
    line = _one_line_error(result.stderr)
    assert needle in line
    assert str(path) in line or "tool_confirmation" in line


def test_bad_environment_is_one_line_and_exit_2(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKGATE_SESSION_CONCURRENCY", "0")
    result = runner.invoke(app, ["config", "check"])
    assert result.exit_code == 2
    assert "session_concurrency" in _one_line_error(result.stderr)


def test_no_arguments_prints_help(cli_env: dict[str, str]) -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 2
    assert "Usage: parkgate" in result.stdout
    for command in ("serve", "config", "tools"):
        assert command in result.stdout


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["api"]])
def test_start_up_refuses_a_config_that_cannot_work(
    cli_env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("approval_expiry_by_class:\n  exec: 60\n")
    result = runner.invoke(app, ["--config", str(path), *command])
    assert result.exit_code == 2, result.output
    line = _one_line_error(result.stderr)
    assert "approval_expiry_by_class" in line and "'exec'" in line
