"""Event hashes are RFC 8785 since issue 37; chains and exports hashed before
(Python's json.dumps form) still verify, and tampering is still caught."""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path

from sqlalchemy import text
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.store import CallFilters, Repository
from parkgate.store.canonical import event_hash, legacy_event_hash
from parkgate.store.chain import GENESIS, check_exported, exported_events
from tests.store.helpers import call_events, event, finished, uid

#: Written by `parkgate audit export` of the release before RFC 8785: one call
#: whose input has 0.1, 1e21, 1.0, 1.5e-7, a U+FB01 key and an astral key, and
#: a tool.completed with duration_ms 12.5 (so neither event hashes alike in
#: the two forms).
BEFORE = Path(__file__).parent / "exports" / "before_rfc8785.jsonl"


def _events(text_: str) -> list[dict[str, object]]:
    return list(exported_events(io.StringIO(text_)))


def test_an_export_from_before_rfc8785_verifies() -> None:
    events = _events(BEFORE.read_text(encoding="utf-8"))
    report = check_exported(events)
    assert report.ok and report.chains == 1 and report.events == 2
    first = dict(events[0])
    first["at"] = datetime.fromisoformat(str(first["at"]))
    assert event_hash(GENESIS, first) != first["hash"]  # the old form, not RFC 8785
    assert legacy_event_hash(GENESIS, first) == first["hash"]


def test_a_tampered_export_is_caught() -> None:
    altered = BEFORE.read_text(encoding="utf-8").replace('"ratio":0.1', '"ratio":0.2')
    assert altered != BEFORE.read_text(encoding="utf-8")
    report = check_exported(_events(altered))
    assert [p.chain_index for p in report.problems] == [0]
    assert "do not match" in report.problems[0].detail


def test_verify_export_command(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["audit", "verify-export", str(BEFORE)])
    assert result.exit_code == 0 and "OK: 2 events in 1 call chain verified" in result.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(BEFORE.read_text(encoding="utf-8").replace("12.5", "1.5"), encoding="utf-8")
    result = runner.invoke(app, ["audit", "verify-export", str(bad)])
    assert result.exit_code == 1 and "TAMPERED: modified" in result.stderr


async def _rehash_as_before(repo: Repository, session_id: str) -> None:
    """Re-write a session's chains as the release before RFC 8785 wrote them."""
    events = await repo.events_after(session_id, 0)
    prev: dict[str, str] = {}
    differs = False
    async with repo.engine.begin() as conn:
        for ev in events:
            fields = ev.model_dump()
            before = prev.get(ev.chain_id, GENESIS)
            digest = legacy_event_hash(before, fields)
            assert digest is not None
            differs = differs or digest != event_hash(before, fields)
            await conn.execute(
                text("UPDATE tool_events SET prev_hash = :p, hash = :h WHERE event_id = :e"),
                {"p": before, "h": digest, "e": ev.event_id})
            prev[ev.chain_id] = digest
        for chain_id, head in prev.items():
            await conn.execute(
                text("UPDATE tool_event_chains SET head_hash = :h"
                     " WHERE session_id = :s AND chain_id = :c"),
                {"h": head, "s": session_id, "c": chain_id})
    assert differs  # a float (duration_ms 5.0) spells differently in the two forms


async def test_a_chain_hashed_before_verifies_grows_and_catches_tampering(
    repo: Repository,
) -> None:
    sid, cid = uid("s"), uid("c")
    await repo.apply(call_events(sid, cid), finished(sid, cid))  # duration_ms=5.0
    await _rehash_as_before(repo, sid)
    assert (await repo.verify_chain(sid)).ok

    # The next event of the same chain is hashed in RFC 8785 after the old ones.
    await repo.apply([event(sid, cid, "tool.outcome_late", seq=1, ratio=0.5, one=1.0)])
    assert (await repo.verify_chain(sid)).ok
    newest = (await repo.events_after(sid, 0))[-1]
    assert newest.hash == event_hash(newest.prev_hash, newest.model_dump())

    # An export of the mixed chain verifies from the file alone.
    buf = io.StringIO()
    await repo.export("jsonl", buf, CallFilters(session_id=sid))
    assert check_exported(_events(buf.getvalue())).ok

    victim = (await repo.events_after(sid, 0))[0]
    async with repo.engine.begin() as conn:
        await conn.execute(text("UPDATE tool_events SET tool_name = 'shell' WHERE event_id = :e"),
                           {"e": victim.event_id})
    report = await repo.verify_chain(sid)
    assert report.first is not None and report.first.event_id == victim.event_id


async def test_csv_cells_are_canonical_json(repo: Repository) -> None:
    sid = uid("s")
    await repo.apply(call_events(sid, "c"),
                     finished(sid, "c", input={"b": 1.0, "a": [0.1, 1e21], "é": "☕"}))
    buf = io.StringIO()
    await repo.export("csv", buf, CallFilters(session_id=sid))
    # 1e21 is stored as the integer JSONB gives back (parkgate.store.canonical).
    assert '"{""a"":[0.1,1000000000000000000000],""b"":1,""é"":""☕""}"' in buf.getvalue()
