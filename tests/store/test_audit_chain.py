"""Tamper evidence: modify, delete and re-order events in SQL; verify names each."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from parkgate.store import Repository
from parkgate.store.canonical import event_hash
from tests.store.helpers import call_events, event, finished, uid


async def _sql(repo: Repository, statement: str, **params: Any) -> None:
    async with repo.engine.begin() as conn:
        await conn.execute(text(statement), params)


async def _three_calls(repo: Repository) -> tuple[str, list[str]]:
    sid = uid("s")
    calls = [uid("c") for _ in range(3)]
    for cid in calls:
        evs = call_events(sid, cid)
        evs.insert(1, event(sid, cid, "tool.confirmation_requested", request_id="r"))
        await repo.apply(evs, finished(sid, cid))
    return sid, calls


async def _events(repo: Repository, sid: str, cid: str) -> list[Any]:
    return [e for e in await repo.events_after(sid, 0) if e.chain_id == cid]


async def test_intact_history_verifies(repo: Repository) -> None:
    await _three_calls(repo)
    report = await repo.verify_chain()
    assert report.ok and report.chains == 3 and report.events == 9


async def test_modified_event_is_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    target = (await _events(repo, sid, calls[1]))[1]
    await _sql(
        repo,
        "UPDATE tool_events SET message = 'nothing to see' WHERE event_id = :e",
        e=target.event_id,
    )
    report = await repo.verify_chain()
    assert not report.ok
    first = report.first
    assert first is not None
    assert (first.kind, first.event_id, first.chain_id) == ("modified", target.event_id, calls[1])
    assert len(report.problems) == 1


async def test_modified_json_data_is_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    target = (await _events(repo, sid, calls[0]))[0]
    data_sql = (
        "UPDATE tool_events SET data = CAST(:d AS JSONB) WHERE event_id = :e"
        if repo.dialect == "postgresql"
        else "UPDATE tool_events SET data = :d WHERE event_id = :e"
    )
    await _sql(repo, data_sql, d='{"input": {"path": "other.txt"}}', e=target.event_id)
    first = (await repo.verify_chain()).first
    assert first is not None and (first.kind, first.event_id) == ("modified", target.event_id)


async def test_deleted_event_is_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    evs = await _events(repo, sid, calls[2])
    await _sql(repo, "DELETE FROM tool_events WHERE event_id = :e", e=evs[1].event_id)
    first = (await repo.verify_chain()).first
    assert first is not None
    assert first.kind == "deleted"
    assert first.event_id == evs[2].event_id  # the event right after the gap
    assert "index 1" in first.detail


async def test_deleted_newest_event_is_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    evs = await _events(repo, sid, calls[0])
    await _sql(repo, "DELETE FROM tool_events WHERE event_id = :e", e=evs[-1].event_id)
    first = (await repo.verify_chain()).first
    assert first is not None and first.kind == "deleted" and first.chain_id == calls[0]
    assert "newest 1" in first.detail and str(evs[-2].seq) in first.detail


async def test_deleted_whole_chain_is_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    await _sql(
        repo, "DELETE FROM tool_events WHERE session_id = :s AND chain_id = :c", s=sid, c=calls[1]
    )
    report = await repo.verify_chain()
    assert [p.kind for p in report.problems] == ["deleted"]
    assert report.problems[0].chain_id == calls[1]


async def test_reordered_events_are_named(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    evs = await _events(repo, sid, calls[1])
    a, b = evs[0], evs[1]
    # Swap the two events' positions in history (seq is the stored order).
    await _sql(repo, "UPDATE tool_events SET seq = -1 WHERE seq = :a", a=a.seq)
    await _sql(repo, "UPDATE tool_events SET seq = :a WHERE seq = :b", a=a.seq, b=b.seq)
    await _sql(repo, "UPDATE tool_events SET seq = :b WHERE seq = -1", b=b.seq)
    first = (await repo.verify_chain()).first
    assert first is not None
    assert (first.kind, first.event_id, first.seq) == ("reordered", b.event_id, a.seq)


async def test_rehashed_modification_breaks_the_link(repo: Repository) -> None:
    """Editing an event and re-computing its own hash is caught at the next link."""
    sid, calls = await _three_calls(repo)
    evs = await _events(repo, sid, calls[0])
    forged = evs[0].model_dump()
    forged["message"] = "forged"
    new_hash = event_hash(forged["prev_hash"], forged)
    await _sql(
        repo,
        "UPDATE tool_events SET message = 'forged', hash = :h WHERE event_id = :e",
        h=new_hash,
        e=evs[0].event_id,
    )
    first = (await repo.verify_chain()).first
    assert first is not None
    assert (first.kind, first.event_id) == ("modified", evs[1].event_id)
    assert "prev_hash" in first.detail


async def test_first_problem_is_the_earliest(repo: Repository) -> None:
    sid, calls = await _three_calls(repo)
    early = (await _events(repo, sid, calls[0]))[2]
    late = (await _events(repo, sid, calls[2]))[0]
    for e in (late, early):
        await _sql(repo, "UPDATE tool_events SET tool_name = 'x' WHERE event_id = :e", e=e.event_id)
    report = await repo.verify_chain()
    assert len(report.problems) == 2
    assert report.first is not None and report.first.event_id == early.event_id
