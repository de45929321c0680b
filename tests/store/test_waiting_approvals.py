"""`Repository.waiting_approvals`: what the approver inbox reads, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import timedelta

from parkgate.calls.records import ApprovalRecord, CallStatus, CallUpdate
from parkgate.models import utcnow
from parkgate.store.repository import Repository


def _approval(sid: str, tid: str, age: int, tool: str = "write_file") -> ApprovalRecord:
    now = utcnow()
    return ApprovalRecord(
        request_id=uuid.uuid4().hex, session_id=sid, turn_id="t1", tool_use_id=tid,
        tool_name=tool, token_hash=uuid.uuid4().hex, input_hash="h",
        requested_at=now - timedelta(seconds=age), expires_at=now + timedelta(hours=1),
        info={"side_effects": "write"},
    )


async def test_undecided_newest_first_with_project_status_and_submitter(
    repo: Repository,
) -> None:
    sid, other = f"s-{uuid.uuid4().hex[:8]}", f"s-{uuid.uuid4().hex[:8]}"
    await repo.register_session(sid, "/tmp")
    await repo.register_session(other, "/tmp", project="elsewhere")
    old, new, shell = (_approval(sid, "toolu_old", 30), _approval(sid, "toolu_new", 10),
                       _approval(sid, "toolu_sh", 20, tool="shell"))
    decided, foreign = _approval(sid, "toolu_done", 5), _approval(other, "toolu_o", 1)
    for a in (old, new, shell, decided, foreign):
        await repo.save_approval(a)
    await repo.decide_approval(decided.request_id, "allow", "bob", "api")
    await repo.update_call(CallUpdate(session_id=sid, tool_use_id="toolu_new",
                                      status=CallStatus.PARKED, tool_name="write_file"))
    await repo.record_submission(sid, ["toolu_new"], "k1", "agent-key")

    rows = await repo.waiting_approvals(project="default")
    assert [r.approval.request_id for r in rows] == [
        new.request_id, shell.request_id, old.request_id]
    first = rows[0]
    assert first.project == "default" and first.status == CallStatus.PARKED
    assert first.submitter is not None and first.submitter.key_name == "agent-key"
    assert rows[2].status is None and rows[2].submitter is None
    everywhere = await repo.waiting_approvals()
    assert {r.approval.request_id for r in everywhere} >= {foreign.request_id, new.request_id}
    assert [r.project for r in everywhere if r.approval.request_id == foreign.request_id] == [
        "elsewhere"]
    assert [r.approval.request_id for r in await repo.waiting_approvals(
        project="default", tool_name="shell")] == [shell.request_id]
    assert [r.approval.request_id for r in await repo.waiting_approvals(
        project="default", session_id=sid, limit=1)] == [new.request_id]
