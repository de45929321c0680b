"""Reminders and escalation while parked (time-skipping server, webhook sink).

A rule with `remind_after_seconds` notifies again after that long; with
`escalate_after_seconds` / `escalate_to` it then notifies the escalation
people (their personal links decide). Timers are durable (workflow timers,
under the `reminders-v1` patch) and nothing is sent once the call is decided.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock
from tests.api.rig import WebhookSink
from tests.fixtures.temporal import durable_rig, replayer

HOUR = 3600
POLICY = {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"],
                     "remind_after_seconds": HOUR, "escalate_after_seconds": 2 * HOUR,
                     "escalate_to": ["group:leads"]}]}
PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {}, "dave": {}, "erin": {}},
    "approver_groups": {"leads": ["dave", "erin", "alice"]},
}


async def received(sink: WebhookSink, count: int) -> list[dict[str, Any]]:
    for _ in range(400):
        if len(sink.received) >= count:
            return [r["body"] for r in sink.received]
        await asyncio.sleep(0.025)
    raise AssertionError(f"expected {count} notices, got {len(sink.received)}")


def notify_times(history: WorkflowHistory) -> list[float]:
    """When each parkgate.notify was scheduled (server time, seconds)."""
    return [
        e.event_time.ToDatetime().timestamp()
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "parkgate.notify"
    ]


async def replays(history: WorkflowHistory) -> None:
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_reminder_then_escalation_then_escalated_approver_decides(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with WebhookSink().running() as sink, durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, policy=POLICY,
        webhooks=[{"url": sink.url}], **PEOPLE,
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_r", name="write_file", input={"path": "r.txt", "content": "r"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_r")
        first = (await received(sink, 1))[0]
        assert "notice" not in first
        assert [a["name"] for a in first["approvers"]] == ["alice"]

        await temporal_env.sleep(HOUR + 60)
        reminder = (await received(sink, 2))[1]
        assert reminder["notice"] == "reminder" and reminder["request_id"] == rid
        assert [a["name"] for a in reminder["approvers"]] == ["alice"]

        await temporal_env.sleep(HOUR)
        escalation = (await received(sink, 3))[2]
        assert escalation["notice"] == "escalation"
        # alice is a named approver already: the escalation goes to the others,
        # each with a personal link of their own.
        links = {a["name"]: a["approval_url"] for a in escalation["approvers"]}
        assert sorted(links) == ["dave", "erin"]
        assert links["dave"] != links["erin"] and "/approve/" in links["dave"]

        won = await rig.dispatcher.decide(rid, "allow", decided_by="dave", via="link",
                                          principal_id="approver:dave", approver="dave")
        assert won.accepted and won.winner is not None
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        history = await handle.fetch_history()
    times = notify_times(history)
    assert len(times) == 3
    assert abs((times[1] - times[0]) - HOUR) < 5
    assert abs((times[2] - times[0]) - 2 * HOUR) < 5
    await replays(history)


async def test_nothing_is_sent_after_the_decision(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with WebhookSink().running() as sink, durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, policy=POLICY,
        webhooks=[{"url": sink.url}], **PEOPLE,
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_d", name="write_file", input={"path": "d.txt", "content": "d"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_d")
        await received(sink, 1)
        await temporal_env.sleep(HOUR + 60)
        await received(sink, 2)  # the reminder
        won = await rig.dispatcher.decide(rid, "deny", decided_by="alice", via="link",
                                          principal_id="approver:alice", approver="alice",
                                          reason="no")
        assert won.accepted
        outcome = await handle.result()
        assert outcome.status == CallStatus.DENIED
        await temporal_env.sleep(3 * HOUR)
        await asyncio.sleep(0.3)
        assert [r["body"].get("notice") for r in sink.received] == [None, "reminder"]
        history = await handle.fetch_history()
    assert len(notify_times(history)) == 2
    await replays(history)


async def test_a_rule_without_timers_schedules_none(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """No reminder keys: no patch marker and no timer beside the expiry."""
    async with WebhookSink().running() as sink, durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, webhooks=[{"url": sink.url}],
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_n", name="write_file", input={"path": "n.txt", "content": "n"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_n")
        await received(sink, 1)
        await rig.dispatcher.resolve_confirmation(rid, "allow", decided_by="dana")
        assert (await handle.result()).status == CallStatus.SUCCEEDED
        history = await handle.fetch_history()
    markers = [e for e in history.events
               if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
               and "reminders-v1" in str(e.marker_recorded_event_attributes)]
    timers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    assert markers == [] and len(timers) == 1
