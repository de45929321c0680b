"""Repository.apply_decided: an approved run's decision, events and row in one
transaction (first decision wins; an unknown request writes nothing)."""

from __future__ import annotations

import pytest

from parkgate.store import ApprovalNotFoundError, CallStatus, CallUpdate, Repository
from tests.store.helpers import event, uid
from tests.store.test_repository import _approval


async def test_decision_events_and_row_in_one_write(repo: Repository) -> None:
    sid, cid, rid = uid("s"), uid("c"), uid("r")
    await repo.save_approval(_approval(rid, sid, cid))
    decided = _approval(rid, sid, cid).model_copy(
        update={"decision": "allow", "decided_by": "alice", "via": "api", "info": {}}
    )
    with repo.final_rows.watch(sid, cid) as woken:
        await repo.apply_decided(
            decided,
            [event(sid, cid, "tool.confirmation_resolved"), event(sid, cid, "tool.called", seq=1)],
            CallUpdate(session_id=sid, tool_use_id=cid, status=CallStatus.RUNNING,
                       decision="allow", tool_name="write_file"),
        )
        assert not woken.is_set()  # running, not final
    stored = await repo.get_approval(rid)
    assert stored is not None and stored.decision == "allow" and stored.decided_by == "alice"
    assert stored.info  # a decision-only write leaves the stored request as it was
    call = await repo.get_call(sid, cid)
    assert call is not None and call.status is CallStatus.RUNNING and call.decision == "allow"
    types = [e.type for e in await repo.events_after(sid, 0)]
    assert types == ["tool.confirmation_resolved", "tool.called"]

    # A later decision never overwrites the stored one.
    await repo.apply_decided(decided.model_copy(update={"decision": "deny"}), [], None)
    again = await repo.get_approval(rid)
    assert again is not None and again.decision == "allow"


async def test_unknown_request_writes_nothing(repo: Repository) -> None:
    sid, cid = uid("s"), uid("c")
    ghost = _approval(uid("r"), sid, cid).model_copy(update={"decision": "allow"})
    with pytest.raises(ApprovalNotFoundError):
        await repo.apply_decided(ghost, [event(sid, cid, "tool.called")],
                                 CallUpdate(session_id=sid, tool_use_id=cid,
                                            status=CallStatus.RUNNING))
    assert await repo.get_call(sid, cid) is None
    assert await repo.events_after(sid, 0) == []
