"""Help output and paging hints: printed once, readable, and re-runnable as printed."""

from __future__ import annotations

import ast
import asyncio
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.calls.records import CallUpdate
from parkgate.cli import app
from parkgate.cli.root import COMMANDS, load_command
from parkgate.settings import Settings
from parkgate.store import Repository
from tests.cli.conftest import parkgate_argv

runner = CliRunner()
_ENV = {"COLUMNS": "200"}


@pytest.mark.parametrize("args", [[], ["tools"], ["keys"], ["config"]])
def test_a_group_without_subcommand_prints_its_help_once(
    cli_env: dict[str, str], args: list[str]
) -> None:
    result = runner.invoke(app, args, env=_ENV)
    assert result.exit_code == 2, result.output
    assert result.stdout.count("Usage:") == 1, result.stdout


def test_help_texts_keep_their_defaults_and_flags_show_no_type(cli_env: dict[str, str]) -> None:
    serve = runner.invoke(app, ["serve", "--help"], env=_ENV).stdout
    assert "api_port setting, 8420" in serve
    assert "port ." not in serve and "start ." not in serve
    api = runner.invoke(app, ["api", "--help"], env=_ENV).stdout
    assert "api_host setting" in api and "api_port setting" in api
    approve = runner.invoke(app, ["approve", "--help"], env=_ENV).stdout
    assert "your user name" in approve
    for out in (serve, api, approve):
        assert "<bool>" not in out
        assert "Show this message" in out


def test_every_command_loads_from_the_module_listed_for_it() -> None:
    # Commands load when looked up (parkgate.cli.root.COMMANDS): each listed module
    # defines its commands, and no module with commands is left out of the table.
    for name in COMMANDS:
        assert load_command(name).name == name
    root = Path(__file__).resolve().parents[2] / "dispatcher" / "cli"
    defining = {
        path.stem for path in root.glob("*.py") if path.stem != "root"
        and ("\napp = typer.Typer(" in (text := path.read_text()) or "\ndef register(app" in text)
    }
    assert set(COMMANDS.values()) == defining


def test_the_cli_imports_no_private_typer_module() -> None:
    root = Path(__file__).resolve().parents[2] / "dispatcher" / "cli"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name.split(".")[0] in ("typer", "click"):
                    assert "._" not in name, (path, name)


def _seed_calls(count: int) -> None:
    async def seed() -> None:
        settings = Settings()
        async with await Repository.connect(settings.effective_database_url) as repo:
            for n in range(count):
                await repo.apply(
                    [],
                    CallUpdate(
                        session_id="s1", tool_use_id=f"c{n}", tool_name="shell", turn_id="t1"
                    ),
                )

    asyncio.run(seed())


def test_the_paging_hint_keeps_the_filters(cli_env: dict[str, str]) -> None:
    assert runner.invoke(app, ["db", "upgrade"], env=_ENV).exit_code == 0
    _seed_calls(3)
    first = runner.invoke(
        app, ["calls", "list", "-s", "s1", "--tool", "shell", "-n", "2"], env=_ENV
    )
    assert first.exit_code == 0, first.output
    hint = next(line for line in first.stdout.splitlines() if line.startswith("more: "))
    words = shlex.split(hint.removeprefix("more: "))
    assert words[:3] == ["parkgate", "calls", "list"]
    assert ["--session", "s1"] == words[3:5] and "--tool" in words and "--limit" in words
    # The printed command runs as printed and shows the rest of the same filtered list.
    second = subprocess.run(
        [*parkgate_argv(), *words[1:]], env={**cli_env, **_ENV}, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    assert "Tool calls (1)" in second.stdout
    assert "more:" not in second.stdout
