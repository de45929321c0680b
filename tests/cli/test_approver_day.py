"""The approver's day at a terminal: named approvers without editing YAML,
listings that never cut a cell (a table that fits, else one block per record),
`--output json`, and messages that say what happened."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.cli.common import console
from parkgate.cli.decide import _cancelled_words
from parkgate.settings import get_settings

runner = CliRunner()


def _run(args: list[str], code: int = 0) -> tuple[str, str]:
    result = runner.invoke(app, args)
    assert result.exit_code == code, f"{args}: {result.output}"
    return result.stdout, result.stderr


@pytest.fixture
def width() -> Iterator[list[int]]:
    """Set `width[0]` to choose the console's width for one command."""
    before = console._width
    chosen = [200]
    console.width = 200
    yield chosen
    console._width = before


def test_approvers_add_list_remove(cli_env: dict[str, str], width: list[int]) -> None:
    out, _ = _run(["approvers", "add", "alice", "--email", "alice@example.com"])
    path = Path(cli_env["PARKGATE_DATA_DIR"]) / "server.yaml"
    assert out.startswith("added approver alice (email alice@example.com) to ")
    assert "restart" in out
    _run(["approvers", "add", "bob"])
    doc = yaml.safe_load(path.read_text())
    doc["approver_groups"] = {"oncall": ["alice", "bob"]}
    path.write_text(yaml.safe_dump(doc))
    get_settings.cache_clear()  # each command is a new process outside tests
    listed = json.loads(_run(["approvers", "list", "-o", "json"])[0])
    assert listed["alice"]["email"] == "alice@example.com"
    assert listed["alice"]["groups"] == ["oncall"] and listed["bob"]["groups"] == ["oncall"]
    table, _ = _run(["approvers", "list"])
    assert "alice@example.com" in table and "Approvers (2)" in table

    _, err = _run(["approvers", "add", "alice"], 2)
    assert "already exists" in err
    _, err = _run(["approvers", "add", "no spaces"], 2)
    assert "NAME" in err
    out, _ = _run(["approvers", "remove", "alice"])
    assert out.startswith("removed approver alice and from group oncall")
    doc = yaml.safe_load(path.read_text())
    assert list(doc["approvers"]) == ["bob"] and doc["approver_groups"] == {"oncall": ["bob"]}
    assert (path.parent / "server.yaml.bak").exists()
    _, err = _run(["approvers", "remove", "alice"], 2)
    assert "no approver 'alice'" in err and "bob" in err


def test_a_change_that_breaks_the_settings_is_refused(cli_env: dict[str, str]) -> None:
    """A rule naming the approver: removing them would break the policy."""
    path = Path(cli_env["PARKGATE_DATA_DIR"]) / "server.yaml"
    path.parent.mkdir(parents=True)
    text = yaml.safe_dump({
        "approvers": {"carol": {}},
        "tool_confirmation": {"rules": [{"tool": "shell", "mode": "prompt",
                                         "approvers": ["carol"]}]},
    })
    path.write_text(text)
    _, err = _run(["approvers", "remove", "carol"], 2)
    assert "left unchanged" in err and "carol" in err
    assert path.read_text() == text


def test_listings_never_cut_a_cell(cli_env: dict[str, str], width: list[int]) -> None:
    long_name = "a-key-with-a-long-name-that-does-not-fit-a-narrow-terminal"
    _run(["db", "upgrade"])
    _run(["keys", "create", "--name", long_name, "--role", "approver"])
    console.width = 200
    wide, _ = _run(["keys", "list"])
    def header(text: str) -> bool:
        return any(line.split()[:2] == ["name", "id"] for line in text.splitlines())

    assert header(wide) and long_name in wide
    console.width = 50
    narrow, _ = _run(["keys", "list"])
    assert not header(narrow) and long_name in narrow  # one block per record, whole
    assert any(line.split() == ["roles", "approver"] for line in narrow.splitlines())
    keys = json.loads(_run(["keys", "list", "-o", "json"])[0])
    assert [k["name"] for k in keys] == [long_name] and keys[0]["roles"] == ["approver"]
    calls = json.loads(_run(["calls", "list", "--status", "parked", "--output", "json"])[0])
    assert calls == {"calls": [], "next_cursor": None}
    tools = json.loads(_run(["tools", "list", "-o", "json"])[0])
    assert "write_file" in {t["name"] for t in tools}
    _, err = _run(["keys", "list", "-o", "yaml"], 2)
    assert "--output" in err


def test_cancel_says_what_it_cancelled() -> None:
    assert _cancelled_words(2, {"parked": 2}, "s1") == "cancelled 2 parked calls of session s1"
    assert (_cancelled_words(2, {"parked": 1, "running": 1}, "s1")
            == "cancelled 1 parked and 1 running calls of session s1")
    assert _cancelled_words(1, {"parked": 1}, "s1") == "cancelled 1 parked call of session s1"
    assert _cancelled_words(3, {"parked": 1}, "s1") == "cancelled 3 calls of session s1"
    assert "nothing to cancel" in _cancelled_words(0, {}, "s1")
