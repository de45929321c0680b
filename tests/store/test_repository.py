"""Repository writes and reads on both backends (the `repo` fixture is parametrized)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from parkgate.models import SideEffects, TextBlock, ToolErrorClass, ToolResultBlock, utcnow
from parkgate.store import (
    ApiKeyNameTakenError,
    ApiKeyNotFoundError,
    ApprovalNotFoundError,
    ApprovalRecord,
    CallFilters,
    CallStatus,
    CallUpdate,
    InvalidCursorError,
    Repository,
    SessionConflictError,
)
from tests.store.helpers import call_events, event, finished, uid


async def test_apply_creates_call_and_events(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    added = await repo.record(
        call_events(sid, cid),
        CallUpdate(
            session_id=sid,
            tool_use_id=cid,
            turn_id="turn-1",
            tool_name="read_file",
            side_effects=SideEffects.READ,
            status=CallStatus.RUNNING,
            input={"path": "a.txt", "password": "hunter2", "nested": {"API_KEY": "k"}},
        ),
    )
    assert added == 2
    call = await repo.get_call(sid, cid)
    assert call is not None
    assert call.status is CallStatus.RUNNING
    assert call.input == {
        "path": "a.txt",
        "password": "[REDACTED]",
        "nested": {"API_KEY": "[REDACTED]"},
    }
    assert call.created_at.tzinfo is not None and call.created_at.utcoffset() == timedelta(0)
    events = await repo.events_after(sid, 0)
    assert [e.type for e in events] == ["tool.called", "tool.completed"]
    assert [e.chain_index for e in events] == [0, 1]
    assert events[1].prev_hash == events[0].hash


async def test_apply_is_idempotent(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    evs = call_events(sid, cid)
    assert await repo.record(evs, finished(sid, cid)) == 2
    assert await repo.record(evs, finished(sid, cid)) == 0
    assert await repo.record(evs + evs) == 0
    await repo.apply(evs, finished(sid, cid))  # HistoryStore.apply: same, returns None
    assert len(await repo.events_after(sid, 0)) == 2
    assert (await repo.verify_chain()).ok


async def test_update_leaves_none_fields_unchanged(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    await repo.apply([], CallUpdate(session_id=sid, tool_use_id=cid, tool_name="shell", rule="r1"))
    result = ToolResultBlock(
        tool_use_id=cid,
        content=[TextBlock(text="boom\x00")],
        is_error=True,
        error_class=ToolErrorClass.EXECUTION_ERROR,
    )
    await repo.apply(
        [],
        CallUpdate(
            session_id=sid,
            tool_use_id=cid,
            status=CallStatus.FAILED,
            error_class=ToolErrorClass.EXECUTION_ERROR,
            result=result,
            full_output={"content": [{"type": "text", "text": "x" * 10_000}]},
            duration_ms=12.5,
        ),
    )
    call = await repo.get_call(sid, cid)
    assert call is not None
    assert call.tool_name == "shell" and call.rule == "r1"
    assert call.status is CallStatus.FAILED
    assert call.error_class == "execution_error"
    assert call.result is not None and call.result.is_error and call.result.text == "boom\ufffd"
    assert call.full_output is not None
    assert len(call.full_output["content"][0]["text"]) == 10_000
    assert call.duration_ms == 12.5


async def test_list_calls_filters_and_keyset_pagination(repo: Repository) -> None:
    sid = uid("s")
    ids = []
    # One base instant: the window below is relative to it, not to a clock
    # read after the writes (a slow machine moved c3 out of it).
    base = utcnow()
    for i in range(7):
        cid = f"c{i}"
        ids.append(cid)
        await repo.apply(
            [],
            finished(
                sid,
                cid,
                tool_name="write_file" if i % 2 else "read_file",
                decided_by="alice" if i == 3 else None,
                created_at=base + timedelta(seconds=i),
            ),
        )
    await repo.apply([], finished(uid("other"), "c-other"))

    seen: list[str] = []
    cursor = None
    while True:
        page = await repo.list_calls(CallFilters(session_id=sid), limit=3, cursor=cursor)
        seen += [c.tool_use_id for c in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == list(reversed(ids))  # newest first, no gap, no duplicate

    writes = await repo.list_calls(CallFilters(session_id=sid, tool_name="write_file"))
    assert [c.tool_use_id for c in writes.items] == ["c5", "c3", "c1"]
    by_alice = await repo.list_calls(CallFilters(decided_by="alice"))
    assert [c.tool_use_id for c in by_alice.items] == ["c3"]
    status = await repo.list_calls(CallFilters(status=[CallStatus.FAILED]))
    assert status.items == []
    window = await repo.list_calls(
        CallFilters(session_id=sid, since=base + timedelta(seconds=2.5))
    )
    assert {c.tool_use_id for c in window.items} == {"c3", "c4", "c5", "c6"}
    with pytest.raises(InvalidCursorError):
        await repo.list_calls(cursor="not-a-cursor")


async def test_timeline_includes_sub_calls_with_durations(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    t0 = utcnow()
    evs = [
        event(sid, cid, "tool.called", at=t0),
        event(sid, "sub-1", "tool.called", at=t0 + timedelta(milliseconds=10), parent=cid),
        event(sid, "sub-1", "tool.completed", at=t0 + timedelta(milliseconds=30), parent=cid),
        event(sid, cid, "tool.completed", at=t0 + timedelta(milliseconds=45)),
    ]
    await repo.apply(evs, finished(sid, cid))
    timeline = await repo.timeline(sid, cid)
    assert [(e.event.tool_use_id, e.event.type) for e in timeline] == [
        (cid, "tool.called"),
        ("sub-1", "tool.called"),
        ("sub-1", "tool.completed"),
        (cid, "tool.completed"),
    ]
    assert timeline[0].since_previous_ms is None
    assert [round(e.since_previous_ms or 0) for e in timeline[1:]] == [10, 20, 15]
    assert round(timeline[-1].since_start_ms) == 45
    # Sub-call events join the parent's chain.
    assert {e.event.chain_id for e in timeline} == {cid}
    assert [e.event.chain_index for e in timeline] == [0, 1, 2, 3]


async def test_events_after_resumes_without_gap(repo: Repository) -> None:
    sid = uid("s")
    for i in range(5):
        await repo.apply(call_events(sid, f"c{i}"))
    await repo.apply(call_events(uid("other"), "c0"))
    first = await repo.events_after(sid, 0, limit=4)
    rest = await repo.events_after(sid, first[-1].seq)
    allseq = [e.seq for e in first + rest]
    assert len(allseq) == 10 and allseq == sorted(allseq) and len(set(allseq)) == 10
    assert all(e.session_id == sid for e in first + rest)
    assert rest[-1].to_event().event_id == rest[-1].event_id
    assert await repo.last_seq(sid) == allseq[-1]


def _approval(request_id: str, sid: str = "s1", cid: str = "c1") -> ApprovalRecord:
    return ApprovalRecord(
        request_id=request_id,
        session_id=sid,
        turn_id="turn-1",
        tool_use_id=cid,
        tool_name="write_file",
        token_hash=f"{request_id:0>64}"[-64:],
        input_hash="i" * 64,
        requested_at=utcnow(),
        expires_at=utcnow() + timedelta(hours=24),
        info={"diff": "+x", "secret": "nope"},
    )


async def test_approvals_first_write_wins(repo: Repository) -> None:
    rid = uid("r")
    await repo.save_approval(_approval(rid))
    await repo.save_approval(_approval(rid))  # idempotent
    stored = await repo.get_approval(rid)
    assert stored is not None and stored.decision is None
    assert stored.info == {"diff": "+x", "secret": "[REDACTED]"}
    assert await repo.get_approval_by_token_hash(stored.token_hash) == stored

    results = await asyncio.gather(
        repo.decide_approval(rid, "allow", "alice", "web", "fine"),
        repo.decide_approval(rid, "deny", "bob", "api", "no"),
    )
    winners = [won for won, _ in results]
    assert sorted(winners) == [False, True]
    records = [rec for _, rec in results]
    assert records[0].decision == records[1].decision
    assert records[0].decided_by in ("alice", "bob") and records[0].decided_at is not None

    # A later save without a decision does not clear it.
    await repo.save_approval(_approval(rid))
    again = await repo.get_approval(rid)
    assert again is not None and again.decision == records[0].decision
    with pytest.raises(ApprovalNotFoundError):
        await repo.decide_approval("missing", "allow", "x", "web", None)
    assert await repo.get_approval("missing") is None


async def test_sessions_register_and_conflict(repo: Repository) -> None:
    sid = uid("s")
    record, created = await repo.register_session(sid, "/ws/a", "main")
    assert created and record.workspace_path == "/ws/a"
    again, created_again = await repo.register_session(sid, "/ws/a", "main")
    assert not created_again and again == record
    with pytest.raises(SessionConflictError) as info:
        await repo.register_session(sid, "/ws/b", "main")
    assert info.value.existing_workspace == "/ws/a"
    assert await repo.get_session(sid) == record
    assert await repo.get_session("nope") is None


async def test_api_keys(repo: Repository) -> None:
    plaintext, record = await repo.create_api_key("ci-bot")
    assert plaintext.startswith("pgk_") and record.prefix == plaintext[:12]
    listed = await repo.list_api_keys()
    assert [k.name for k in listed] == ["ci-bot"]
    assert plaintext not in repr(listed)
    verified = await repo.verify_api_key(plaintext)
    assert verified is not None and verified.id == record.id and verified.last_used_at
    assert await repo.verify_api_key(plaintext + "x") is None
    assert await repo.verify_api_key("") is None
    with pytest.raises(ApiKeyNameTakenError):
        await repo.create_api_key("ci-bot")
    revoked = await repo.revoke_api_key("ci-bot")
    assert revoked.revoked_at is not None
    assert await repo.verify_api_key(plaintext) is None
    with pytest.raises(ApiKeyNotFoundError):
        await repo.revoke_api_key("ci-bot")
    # The name is free again once revoked; revoke by id works too.
    _, second = await repo.create_api_key("ci-bot")
    await repo.revoke_api_key(second.id)
    assert [k.active for k in await repo.list_api_keys()] == [False, False]
    assert await repo.list_api_keys(include_revoked=False) == []


async def test_finished_call_is_not_resurrected(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    await repo.apply([], finished(sid, cid, status=CallStatus.FAILED))
    await repo.apply([], CallUpdate(session_id=sid, tool_use_id=cid, status=CallStatus.RUNNING))
    call = await repo.get_call(sid, cid)
    assert call is not None and call.status is CallStatus.FAILED
    await repo.apply([], CallUpdate(session_id=sid, tool_use_id=cid, status=CallStatus.CANCELLED))
    call = await repo.get_call(sid, cid)
    assert call is not None and call.status is CallStatus.CANCELLED


async def test_oversized_and_nul_text_is_stored_not_rejected(repo: Repository) -> None:
    """PostgreSQL rejects NUL and over-long varchar; the store clips/cleans instead."""
    sid, cid, rid = uid("s"), uid("c"), uid("r")
    await repo.apply(
        [event(sid, cid, "tool.failed", nul="a\x00b")],
        CallUpdate(session_id=sid, tool_use_id=cid, verdict="v" * 100, via="x" * 500),
    )
    call = await repo.get_call(sid, cid)
    assert call is not None and call.verdict == "v" * 32 and call.via == "x" * 64
    await repo.save_approval(_approval(rid))
    won, record = await repo.decide_approval(rid, "deny", "n\x00" * 300, "web", "r\x00")
    assert won and record.decided_by is not None and len(record.decided_by) == 200
    assert record.reason == "r\ufffd"
    assert (await repo.verify_chain()).ok


async def test_hostile_ids_round_trip(repo: Repository) -> None:
    sid, cid = "s\x00" + uid("s"), "c\x00" + "x" * 300
    await repo.apply(call_events(sid, cid), finished(sid, cid))
    call = await repo.get_call(sid, cid)
    assert call is not None and "\x00" not in call.tool_use_id and len(call.tool_use_id) == 200
    assert len(await repo.events_after(sid, 0)) == 2
    assert len(await repo.timeline(sid, cid)) == 2
    assert (await repo.verify_chain()).ok
    record, created = await repo.register_session(sid, "/w\x00", "main")
    assert record.workspace_path == "/w\ufffd"
    assert created and (await repo.register_session(sid, "/w\x00", "main"))[1] is False
