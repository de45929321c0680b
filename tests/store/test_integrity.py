"""An event id written again with other content is an integrity error (issue 12)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from parkgate.api.shared.metrics import INTEGRITY_ERRORS, StoreSampler
from parkgate.store import Repository
from tests.store.helpers import event, uid


async def test_same_content_again_is_idempotent(repo: Repository) -> None:
    sid, tu = uid("s"), uid("tu")
    first = event(sid, tu, "tool.confirmation_resolved", decision="allow", decided_by="alice")
    await repo.apply([first])
    # A retried write of the same step: a later clock, the same meaning.
    again = first.model_copy(update={"at": first.at + timedelta(seconds=3)})
    await repo.apply([again])
    assert await repo.event_conflicts(sid) == []
    assert len(await repo.timeline(sid, tu)) == 1


async def test_other_content_is_kept_logged_and_counted(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    sid, tu = uid("s"), uid("tu")
    won = event(sid, tu, "tool.confirmation_resolved", decision="allow", decided_by="alice")
    await repo.apply([won])
    lost = event(sid, tu, "tool.confirmation_resolved", decision="deny", decided_by="bob")
    with caplog.at_level(logging.ERROR, logger="parkgate.store.repository"):
        await repo.apply([lost])
    assert "store integrity error" in caplog.text and lost.event_id in caplog.text

    timeline = await repo.timeline(sid, tu)
    assert [e.event.data["decided_by"] for e in timeline] == ["alice"]  # the chain is unchanged
    conflicts: list[dict[str, Any]] = await repo.event_conflicts(sid)
    assert len(conflicts) == 1
    assert conflicts[0]["stored"]["data"]["decided_by"] == "alice"
    assert conflicts[0]["attempted"]["data"]["decided_by"] == "bob"
    assert conflicts[0]["tool_use_id"] == tu

    await StoreSampler().refresh(repo)
    assert INTEGRITY_ERRORS._value.get() >= 1
    report = await repo.verify_meaning(sid)
    assert not report.ok
    assert any("integrity error" in p.detail and p.tool_use_id == tu for p in report.problems)


async def test_a_lost_run_that_finished_keeps_its_record(repo: Repository) -> None:
    """The workflow's "worker lost" write never contradicts a recorded finish."""
    from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock
    from parkgate.store import CallStatus
    from tests.store.helpers import call_events, finished

    sid, tu = uid("s"), uid("tu")
    ok = ToolResultBlock(tool_use_id=tu, content=[TextBlock(text="done")])
    await repo.apply(call_events(sid, tu), finished(sid, tu, result=ok, duration_ms=5.0))
    lost = event(sid, tu, "tool.failed").model_copy(
        update={"error_class": ToolErrorClass.EXECUTION_ERROR, "message": "worker lost"}
    )
    unknown = finished(sid, tu, status=CallStatus.FAILED,
                       error_class=ToolErrorClass.EXECUTION_ERROR)
    kept = await repo.record_unless_finished([lost], unknown)
    assert kept is not None and kept.status == CallStatus.SUCCEEDED and kept.result == ok
    types = [e.event.type for e in await repo.timeline(sid, tu)]
    assert types == ["tool.called", "tool.completed"]
    assert (await repo.get_call(sid, tu)).status == CallStatus.SUCCEEDED  # type: ignore[union-attr]
    assert (await repo.verify_meaning(sid)).ok

    # No final event yet: the write happens as usual.
    other = uid("tu")
    called = event(sid, other, "tool.called")
    await repo.apply([called])
    lost2 = event(sid, other, "tool.failed")
    failed_row = finished(sid, other, status=CallStatus.FAILED)
    assert await repo.record_unless_finished([lost2], failed_row) is None
    assert [e.event.type for e in await repo.timeline(sid, other)] == ["tool.called", "tool.failed"]
