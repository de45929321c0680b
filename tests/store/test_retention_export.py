"""Prune keeps the remaining chains verifiable; export writes JSONL and CSV."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

from parkgate.models import utcnow
from parkgate.store import CallFilters, CallStatus, CallUpdate, Repository
from tests.store.helpers import call_events, event, finished, uid
from tests.store.test_repository import _approval


async def test_prune_removes_old_finished_calls_only(repo: Repository) -> None:
    sid = uid("s")
    old = utcnow() - timedelta(days=100)
    # Old and finished: pruned with its events and approvals. Its sub-call is
    # stored as production stores one: events in the parent's chain and an
    # approval under the sub-call id `old.1`, but no `tool_calls` row.
    await repo.apply(
        [*call_events(sid, "old"), event(sid, "old.1", "tool.called", parent="old")],
        finished(sid, "old", finished_at=old, created_at=old),
    )
    await repo.save_approval(_approval(uid("r"), sid, "old"))
    await repo.save_approval(_approval(uid("r"), sid, "old.1"))
    # A call whose id merely looks like a sub-call id of "old" is its own call: kept.
    await repo.apply(call_events(sid, "old.x"), finished(sid, "old.x"))
    lookalike_rid = uid("r")
    await repo.save_approval(_approval(lookalike_rid, sid, "old.x"))
    # Old but still parked: kept.
    await repo.apply(
        call_events(sid, "parked"),
        CallUpdate(session_id=sid, tool_use_id="parked", status=CallStatus.PARKED, created_at=old),
    )
    # Recent and finished: kept.
    await repo.apply(call_events(sid, "recent"), finished(sid, "recent"))
    keep_rid = uid("r")
    await repo.save_approval(_approval(keep_rid, sid, "recent"))

    removed = await repo.prune(timedelta(days=90))
    assert removed == 1
    assert await repo.get_call(sid, "old") is None
    assert await repo.get_call(sid, "parked") is not None
    assert await repo.get_call(sid, "recent") is not None
    chains = {e.chain_id for e in await repo.events_after(sid, 0)}
    assert chains == {"parked", "recent", "old.x"}
    assert await repo.approvals_for_call(sid, "old") == []
    assert await repo.approvals_for_call(sid, "old.1") == []
    assert await repo.get_approval(keep_rid) is not None
    assert await repo.get_approval(lookalike_rid) is not None
    report = await repo.verify_chain()
    assert report.ok and report.chains == 3
    assert await repo.prune(timedelta(days=90)) == 0


async def test_export_jsonl_and_csv(repo: Repository) -> None:
    sid = uid("s")
    for i in range(3):
        await repo.apply(
            call_events(sid, f"c{i}"),
            finished(
                sid,
                f"c{i}",
                input={"path": f"f{i}", "token": "t"},
                created_at=utcnow() + timedelta(seconds=i),
            ),
        )
    progress: list[tuple[int, int]] = []
    buf = io.StringIO()
    count = await repo.export(
        "jsonl", buf, CallFilters(session_id=sid), on_progress=lambda d, t: progress.append((d, t))
    )
    assert count == 3 and progress[-1] == (3, 3)
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["tool_use_id"] for line in lines] == ["c0", "c1", "c2"]  # oldest first
    assert lines[0]["input"] == {"path": "f0", "token": "[REDACTED]"}
    assert [e["type"] for e in lines[0]["events"]] == ["tool.called", "tool.completed"]

    buf = io.StringIO()
    assert await repo.export("csv", buf, CallFilters(session_id=sid)) == 3
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert [r["tool_use_id"] for r in rows] == ["c0", "c1", "c2"]
    assert rows[0]["event_count"] == "2" and rows[0]["status"] == "succeeded"
    assert json.loads(rows[0]["input"]) == {"path": "f0", "token": "[REDACTED]"}
