"""`parkgate audit verify` checks what histories say, not only their hashes (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parkgate.models import utcnow
from parkgate.store import ApprovalRecord, CallStatus, Repository
from tests.store.helpers import event, finished, uid
from tests.store.test_cli_audit import cli, use_db  # noqa: F401 (fixture)


def approval(sid: str, tu: str, request_id: str, **kw: object) -> ApprovalRecord:
    return ApprovalRecord.model_validate(
        {
            "request_id": request_id,
            "session_id": sid,
            "turn_id": "turn-1",
            "tool_use_id": tu,
            "tool_name": "write_file",
            "token_hash": uid("t"),
            "input_hash": "h" * 64,
            "requested_at": utcnow(),
            **kw,
        }
    )


async def store_call(
    repo: Repository,
    sid: str,
    tu: str,
    *,
    resolved: tuple[str, str],
    approval_says: tuple[str, str],
    row_says: tuple[str, str],
    after: list[str],
    status: CallStatus,
) -> None:
    req = uid("req")
    await repo.save_approval(
        approval(sid, tu, req, decision=approval_says[0], decided_by=approval_says[1])
    )
    events = [
        event(sid, tu, "tool.confirmation_requested", request_id=req),
        event(
            sid, tu, "tool.confirmation_resolved", decision=resolved[0], decided_by=resolved[1]
        ).model_copy(update={"request_id": req}),
        *(event(sid, tu, t) for t in after),
    ]
    events[0] = events[0].model_copy(update={"request_id": req})
    await repo.apply(
        events,
        finished(
            sid, tu, request_id=req, decision=row_says[0], decided_by=row_says[1], status=status
        ),
    )


async def test_true_history_passes(repo: Repository) -> None:
    sid, tu = uid("s"), uid("tu")
    alice = ("allow", "alice")
    await store_call(
        repo, sid, tu, resolved=alice, approval_says=alice, row_says=alice,
        after=["tool.called", "tool.completed"], status=CallStatus.SUCCEEDED,
    )
    report = await repo.verify_meaning(sid)
    assert report.ok, [p.describe() for p in report.problems]
    assert report.calls == 1


async def test_each_impossible_story_is_named(repo: Repository) -> None:
    sid = uid("s")
    # The round: events say bob denied, the tool then ran, the row says alice.
    await store_call(
        repo, sid, "tu_story", resolved=("deny", "bob"), approval_says=("deny", "bob"),
        row_says=("allow", "alice"), after=["tool.failed", "tool.called", "tool.completed"],
        status=CallStatus.SUCCEEDED,
    )
    await store_call(
        repo, sid, "tu_loser", resolved=("allow", "carol"), approval_says=("allow", "dave"),
        row_says=("allow", "dave"), after=["tool.called", "tool.completed"],
        status=CallStatus.SUCCEEDED,
    )
    report = await repo.verify_meaning(sid)
    details = {(p.tool_use_id, p.detail) for p in report.problems}
    story = {d for tu, d in details if tu == "tu_story"}
    assert "both tool.failed and tool.completed recorded" in story
    assert "tool.called after the request was resolved as deny" in story
    assert any("call row says allow by alice" in d for d in story)
    assert any("succeeded after the request was resolved as deny" in d for d in story)
    loser = {d for tu, d in details if tu == "tu_loser"}
    assert any("event says allow by carol, approval row says allow by dave" in d for d in loser)


async def test_cli_prints_each_violation_and_fails(
    repo: Repository,
    db_url: str,
    use_db: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    sid = uid("s")
    await store_call(
        repo, sid, "tu_bad", resolved=("deny", "bob"), approval_says=("deny", "bob"),
        row_says=("deny", "bob"), after=["tool.failed", "tool.called"],
        status=CallStatus.DENIED,
    )
    code, out, err = await cli(monkeypatch, db_url, "audit", "verify", "--session", sid)
    assert code == 1
    assert "OK: 4 events" in out  # the chain itself is intact ...
    assert f"INCONSISTENT: session {sid} call tu_bad: tool.called after" in err  # ... its story not
