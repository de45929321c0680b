"""`parkgate config check` says who tool processes run as and which tools reach
the network (issue 28); an unusable `tool_user` fails the check."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app

runner = CliRunner()


def test_config_check_names_the_tool_user_and_each_tools_network(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARKGATE_TOOL_NETWORK_TOOLS", '["shell"]')
    result = runner.invoke(app, ["config", "check", "--no-settings"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "tool user: " in out
    assert "Network of tool processes" in out
    shell = [line for line in out.splitlines() if line.startswith("│ shell ") and
             line.count("│") == 5]
    assert shell and "host network (tool_network_tools)" in shell[0], out


def test_config_check_fails_on_an_unknown_tool_user(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PARKGATE_TOOL_USER", "no-such-user-parkgate")
    result = runner.invoke(app, ["config", "check"], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no user named 'no-such-user-parkgate'" in lines[0], lines
