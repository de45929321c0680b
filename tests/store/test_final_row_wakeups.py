"""The write that commits a call's final row wakes this process's long-polls
(store/wakeups.py); other writes do not."""

from __future__ import annotations

import asyncio

from parkgate.store import CallStatus, CallUpdate, Repository
from tests.store.helpers import call_events, finished, uid


async def test_final_row_wakes_its_watchers_only(repo: Repository) -> None:
    sid, cid, other = uid("s"), uid("c"), uid("c")
    with repo.final_rows.watch(sid, cid) as mine, repo.final_rows.watch(sid, other) as theirs:
        await repo.apply([], CallUpdate(session_id=sid, tool_use_id=cid,
                                        status=CallStatus.RUNNING, tool_name="write_file"))
        assert not mine.is_set()
        await repo.apply(call_events(sid, cid), finished(sid, cid))
        await asyncio.wait_for(mine.wait(), timeout=5)
        assert not theirs.is_set()
    # Watches end with their block: nothing is kept for calls nobody waits for.
    assert not repo.final_rows._waiting


async def test_a_stored_outcome_kept_by_record_unless_finished_wakes_too(
    repo: Repository,
) -> None:
    sid, cid = uid("s"), uid("c")
    await repo.apply(call_events(sid, cid), finished(sid, cid))
    with repo.final_rows.watch(sid, cid) as woken:
        await repo.record_unless_finished([], finished(sid, cid))
        assert woken.is_set()
