"""Issue 40 (3, 4): listings stay tables at 80 columns (ids shortened to unique
prefixes that `calls show` accepts, `--wide` for them whole), finished calls
keep their request id, durations are rounded, and a name typed on a generic
approval link shows as `NAME (unverified)` in listings, JSON, exports and the
`--decided-by` filter."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.models import SideEffects, utcnow
from parkgate.settings import get_settings
from parkgate.store import CallStatus, CallUpdate, Repository
from tests.store.helpers import event

runner = CliRunner()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SESSION = str(uuid.uuid4())  # Claude Code's session ids are UUIDs
#: `gate` ids are 37 characters; the request ids of decided calls 32.
CALLS = [(f"gate_{uuid.uuid4().hex}", uuid.uuid4().hex) for _ in range(7)]


def _seed() -> None:
    async def seed() -> None:
        repo = await Repository.connect(get_settings().effective_database_url)
        try:
            for i, (call_id, request_id) in enumerate(CALLS):
                who: dict[str, str | None] = (
                    {"decided_by": None, "claimed_name": "alice", "via": "link"} if i == 0
                    else {"decided_by": "cli:root", "via": "cli"})
                await repo.apply(
                    [event(SESSION, call_id, "tool.called"),
                     event(SESSION, call_id, "tool.completed", seq=1,
                           duration_ms=25.326999999999998)],
                    CallUpdate(session_id=SESSION, tool_use_id=call_id, turn_id="t1",
                               tool_name="write_file", side_effects=SideEffects.WRITE,
                               status=CallStatus.SUCCEEDED, request_id=request_id,
                               decision="allow", finished_at=utcnow(),
                               duration_ms=25.326999999999998, **who))
        finally:
            await repo.close()

    asyncio.run(seed())


@pytest.fixture
def stack(cli_env: dict[str, str]) -> Iterator[None]:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    _seed()
    yield


def _terminal(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """The CLI's console as a terminal `width` columns wide."""
    from parkgate.cli import common

    monkeypatch.setattr(common.console, "_width", width)
    monkeypatch.setattr(common.console, "_force_terminal", True)


def _out(argv: list[str]) -> str:
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    return ANSI.sub("", result.stdout)


@pytest.mark.parametrize("width", [80, 120])
def test_calls_list_is_a_table_that_fits(
    stack: None, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    _terminal(monkeypatch, width)
    out = _out(["calls", "list"])
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    header = next(line for line in lines if "tool_use_id" in line)
    assert "request" in header and "decided by" in header and "status" in header
    assert ("session" in header) == (width == 120)  # at 80 the session column goes
    rows = [line for line in lines if "write_file" in line]
    assert len(rows) == 7  # one line a call: a table, not 9-line records
    for call_id, request_id in CALLS:
        row = next(line for line in rows if call_id[:8] in line)
        assert call_id not in row and "…" in row  # shortened, whole with --wide
        assert request_id[:8] in row  # finished calls keep their request id
        assert "25ms" in row
    (alice,) = [i for i, line in enumerate(lines) if "alice" in line]
    assert "write_file" in lines[alice] and lines[alice + 1].strip() == "(unverified)"
    assert "--wide shows them whole" in out


def test_wide_and_prefixes_give_the_whole_ids(
    stack: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _terminal(monkeypatch, 80)
    wide = _out(["calls", "list", "--wide"])
    for call_id, request_id in CALLS:
        assert call_id in wide and request_id in wide
    call_id, request_id = CALLS[0]
    short = call_id[:12]
    shown = _out(["calls", "show", short])
    assert call_id in shown and "by alice (unverified)" in shown
    assert "25.326" not in shown and "duration_ms=25ms" in shown
    assert max(len(line) for line in shown.splitlines()) <= 80
    assert call_id in _out(["calls", "show", SESSION[:8], short])
    ambiguous = runner.invoke(app, ["calls", "show", "gate_"])
    assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.stderr
    missing = runner.invoke(app, ["calls", "show", "nope"])
    assert missing.exit_code == 1 and "no call 'nope'" in missing.stderr


def test_link_decisions_name_who_decided_unverified(stack: None) -> None:
    listed = json.loads(_out(["calls", "list", "-o", "json"]))["calls"]
    link = next(c for c in listed if c["tool_use_id"] == CALLS[0][0])
    assert link["decided_by"] is None and link["claimed_name"] == "alice"
    assert link["decider"] == "alice (unverified)"

    def found(who: str) -> list[str]:
        page = json.loads(_out(["calls", "list", "--decided-by", who, "-o", "json"]))
        return [c["tool_use_id"] for c in page["calls"]]

    assert found("alice") == [CALLS[0][0]]
    assert found("alice (unverified)") == [CALLS[0][0]]
    assert found("alice (verified)") == []
    assert len(found("cli:root")) == 6 and found("cli:root (unverified)") == []
    exported = _out(["audit", "export", "--format", "csv", "--decided-by", "alice"])
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [r["decider"] for r in rows] == ["alice (unverified)"]
    lines = _out(["audit", "export", "--format", "jsonl"]).splitlines()
    assert sorted(json.loads(line)["decider"] for line in lines)[0] == "alice (unverified)"


@pytest.mark.parametrize("width", [80, 120])
def test_keys_list_is_a_table_that_fits(
    cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    for name in ("serve-3fa9", "serve-77c1", "ci-bot"):
        made = runner.invoke(app, ["keys", "create", "--name", name, "--role", "agent",
                                   "--role", "auditor"])
        assert made.exit_code == 0, made.output
    assert runner.invoke(app, ["keys", "revoke", "ci-bot"]).exit_code == 0
    _terminal(monkeypatch, width)
    out = _out(["keys", "list"])
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= width
    rows = [line for line in lines if "agent,auditor" in line]
    assert len(rows) == 3 and any("revoked" in row for row in rows)


def test_the_root_warning_box_wraps_whole_sentences(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from parkgate.cli import common, serve
    from parkgate.sandbox import tool_user

    warning = ("parkgate runs tools as ROOT: an approved shell command can write any file "
               "root owns. Create a dedicated user and set tool_user (docs/OPERATIONS.md).")
    monkeypatch.setattr(tool_user, "root_warning", lambda spec: warning)
    monkeypatch.setattr(common.err_console, "_width", 80)
    serve.warn_root(None)
    lines = ANSI.sub("", capsys.readouterr().err).splitlines()
    assert all(len(line) == 80 and line[0] in "╭│╰" and line[-1] in "╮│╯" for line in lines)
    inside = [line[1:-1].strip() for line in lines[1:-1]]
    assert " ".join(inside) == f"WARNING: {warning}"
    assert any(line.startswith("Create a dedicated user") for line in inside)


@pytest.mark.parametrize("width", [80, 120])
def test_remembered_and_approvers_lists_fit(
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    from datetime import timedelta

    from parkgate.rules.remember_spec import RememberSpec
    from parkgate.rules.remembered import rule_for

    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    deep = "/home/someone/projects/customer-portal/services/billing"
    rules = [rule_for(
        RememberSpec(scope=scope, ttl_seconds=3600), request_id=f"req{i}", project="default",
        session_id=SESSION, workspace_path=deep, tool_name="shell",
        tool_input={"command": "git status"}, decided_at=utcnow() - timedelta(seconds=5),
        created_by="cli:root", principal_id="key:k1", approver=None,
    ) for i, scope in enumerate(("session", "workspace"))]

    async def save() -> None:
        repo = await Repository.connect(get_settings().effective_database_url)
        try:
            for rule in rules:
                await repo.save_remembered(rule)
        finally:
            await repo.close()

    asyncio.run(save())
    config = tmp_path / "people.yaml"
    config.write_text(
        "approvers:\n"
        "  alice: {email: alice.longname@example.org, key: " + "k" * 32 + ", slack_user_id: U01}\n"
        "  bob: {email: bob@example.org}\n"
        "approver_groups: {oncall: [alice, bob]}\n")
    _terminal(monkeypatch, width)
    out = _out(["remembered", "list"])
    assert max(len(line) for line in out.splitlines()) <= width
    assert sum("prefix: git status" in line for line in out.splitlines()) == 2
    people = _out(["--config", str(config), "approvers", "list"])
    lines = people.splitlines()
    assert max(len(line) for line in lines) <= width
    assert any("alice.longname@example.org" in line and "oncall" in line for line in lines)
    assert any("bob@example.org" in line for line in lines)
    # Tables (a header line, one line a record), not `column: value` blocks.
    assert any(line.split()[:2] == ["id", "scope" if width == 120 else "session"]
               for line in out.splitlines())
    assert any(line.split()[:3] == ["name", "email", "API"] for line in lines)
    wide = _out(["remembered", "list", "--wide"])
    assert all(rule.rule_id in wide for rule in rules)
