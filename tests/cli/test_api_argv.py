"""`parkgate api`'s options without typer (parkgate.cli.api_cmd): what the plain
parser serves itself, and what it leaves to the typer command built from the
same OPTIONS."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.cli.api_cmd import OPTIONS, parse_plain

DEFAULTS = {"host": None, "port": None, "log_level": "info", "connect_timeout": 60.0}


@pytest.mark.parametrize(("args", "values"), [
    ([], {}),
    (["--host", "0.0.0.0", "--port", "8080"], {"host": "0.0.0.0", "port": 8080}),
    (["--port=1", "--log-level=warning", "--connect-timeout", "0"],
     {"port": 1, "log_level": "warning", "connect_timeout": 0.0}),
    (["--port", "80", "--port", "81"], {"port": 81}),  # the last one, as click takes it
])
def test_plain_options_are_parsed(args: list[str], values: dict[str, object]) -> None:
    assert parse_plain(args) == {**DEFAULTS, **values}


@pytest.mark.parametrize("args", [
    ["--help"], ["-h"], ["--port"], ["--port", "0"], ["--port", "65536"], ["--port", "x"],
    ["--log-level", "loud"], ["--connect-timeout", "-1"], ["--bogus", "1"], ["extra"],
])
def test_anything_else_is_left_to_the_typer_command(args: list[str]) -> None:
    assert parse_plain(args) is None


def test_the_typer_command_has_the_same_options() -> None:
    help_text = CliRunner().invoke(app, ["api", "--help"], env={"COLUMNS": "200"}).stdout
    for opt in OPTIONS.values():
        assert opt.flag in help_text and opt.help in help_text
    assert "1<=x<=65535" in help_text and "[default: 60.0]" in help_text
    bad = CliRunner().invoke(app, ["api", "--log-level", "loud"])
    assert bad.exit_code == 2 and "unknown log level 'loud'" in bad.stderr
