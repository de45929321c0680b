"""ToolCallWorkflow end to end on the time-skipping server with the real store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from parkgate.approvals.decisions import DecideInput, RejectReason
from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import SIGNAL_DECIDE, call_workflow_id
from parkgate.models import ToolErrorClass, ToolUseBlock, input_hash
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import AUTO_ALL, dev_client, durable_rig, replayer

UPDATE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
}


async def update_events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [e async for e in handle.fetch_history_events() if e.event_type in UPDATE_EVENTS]


async def test_auto_read_file_runs_and_records(
    temporal_env: WorkflowEnvironment, repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, repo, tmp_path) as rig:
        (rig.workspace / "README.md").write_text("# hello durable\n")
        session = rig.session()
        call = ToolUseBlock(id="tu_read", name="read_file", input={"path": "README.md"})
        outcome = await rig.dispatcher.dispatch_outcome(call, session)
        assert outcome.status == CallStatus.SUCCEEDED
        assert not outcome.result.is_error
        assert "hello durable" in outcome.result.text

        row = await repo.get_call(session.session_id, "tu_read")
        assert row.status == CallStatus.SUCCEEDED
        assert row.verdict == "execute"
        assert row.workflow_id == f"call/{session.session_id}/tu_read"
        types = [e.event.type for e in await repo.timeline(session.session_id, "tu_read")]
        assert types == ["tool.called", "tool.completed"]
        assert row.full_output is not None and row.finished_at is not None
        # An auto-approved read runs inside classify: one local activity, one task.
        handle = temporal_env.client.get_workflow_handle(row.workflow_id)
        kinds = [e.WhichOneof("attributes") for e in (await handle.fetch_history()).events]
        assert kinds.count("marker_recorded_event_attributes") == 1
        assert kinds.count("workflow_task_completed_event_attributes") == 1

        # Resubmitting the same id attaches: same outcome, no second execution.
        again = await rig.dispatcher.dispatch_outcome(call, session)
        assert again.result == outcome.result
        types = [e.event.type for e in await repo.timeline(session.session_id, "tu_read")]
        assert types == ["tool.called", "tool.completed"]


async def test_unknown_tool_is_denied_and_recorded(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_x", name="no_such_tool", input={})
        outcome = await rig.dispatcher.dispatch_outcome(call, session)
        assert outcome.error_class == ToolErrorClass.NOT_FOUND
        assert outcome.status == CallStatus.FAILED
        row = await sqlite_repo.get_call(session.session_id, "tu_x")
        assert row.verdict == "deny"
        types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_x")]
        assert types == ["tool.failed"]


async def test_approval_six_hours_later_runs_the_tool(
    temporal_env: WorkflowEnvironment, repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(
            id="tu_w", name="write_file", input={"path": "out.txt", "content": "approved"}
        )
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_w")
        view = await rig.dispatcher.status(session.session_id, "tu_w")
        assert view.approval_url and view.approval_url.startswith("https://parkgate.test/approve/")
        assert view.expires_at is not None and view.requested_at is not None
        assert (view.expires_at - view.requested_at).total_seconds() == 24 * 3600
        approval = await repo.get_approval(request_id)
        assert approval is not None and approval.tool_use_id == "tu_w"
        assert approval.input_hash == input_hash("write_file", call.input)

        await temporal_env.sleep(6 * 3600)
        assert not (rig.workspace / "out.txt").exists()
        winner = await rig.dispatcher.resolve_confirmation(
            request_id, "allow", decided_by="alice", via="link"
        )
        assert winner == "allow"
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "out.txt").read_text() == "approved"
        assert outcome.decision is not None and outcome.decision.decided_by == "alice"

        row = await repo.get_call(session.session_id, "tu_w")
        assert row.status == CallStatus.SUCCEEDED
        assert row.decision == "allow" and row.decided_by == "alice" and row.via == "link"
        types = [e.event.type for e in await repo.timeline(session.session_id, "tu_w")]
        assert types == [
            "tool.confirmation_requested",
            "tool.confirmation_resolved",
            "tool.called",
            "tool.completed",
        ]
        stored = await repo.get_approval(request_id)
        assert stored.decision == "allow" and stored.decided_by == "alice"


async def test_no_decision_before_expiry_is_confirmation_timeout(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, approval_expiry_by_class={"WRITE": 7200}
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_e", name="write_file", input={"path": "e.txt", "content": "x"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_e")
        view = await rig.dispatcher.status(session.session_id, "tu_e")
        assert (view.expires_at - view.requested_at).total_seconds() == 7200
        outcome = await handle.result()  # time skips to the expiry
        assert outcome.error_class == ToolErrorClass.CONFIRMATION_TIMEOUT
        assert outcome.status == CallStatus.EXPIRED
        assert not (rig.workspace / "e.txt").exists()
        row = await sqlite_repo.get_call(session.session_id, "tu_e")
        assert row.status == CallStatus.EXPIRED
        # Deciding after expiry is rejected.
        result = await rig.dispatcher.decide(request_id, "allow", decided_by="late")
        assert not result.accepted and result.reason == RejectReason.EXPIRED


async def test_deny_reason_reaches_the_model(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_d", name="shell", input={"command": "echo hi > d.txt"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_d")
        await rig.dispatcher.resolve_confirmation(
            request_id, "deny", reason="not on a Friday", decided_by="bob"
        )
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.USER_DENIED
        assert outcome.status == CallStatus.DENIED
        assert "not on a Friday" in outcome.result.text
        assert not (rig.workspace / "d.txt").exists()
        row = await sqlite_repo.get_call(session.session_id, "tu_d")
        assert row.status == CallStatus.DENIED and row.reason == "not on a Friday"


async def test_two_concurrent_deciders_exactly_one_wins(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_c", name="write_file", input={"path": "c.txt", "content": "c"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_c")
        first, second = await asyncio.gather(
            rig.dispatcher.decide(request_id, "allow", decided_by="alice"),
            rig.dispatcher.decide(request_id, "deny", decided_by="bob", reason="no"),
        )
        assert [first.accepted, second.accepted].count(True) == 1
        winner = first if first.accepted else second
        loser = second if first.accepted else first
        assert winner.winner is not None
        assert loser.winner == winner.winner  # the loser learns who won
        assert "already decided" in loser.message
        assert loser.reason == RejectReason.ALREADY_DECIDED
        outcome = await handle.result()
        assert outcome.decision == winner.winner
        assert (rig.workspace / "c.txt").exists() == (winner.winner.decision == "allow")


async def test_invalid_decisions_are_rejected_without_history(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_i", name="write_file", input={"path": "i.txt", "content": "1"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_i")

        bad = await rig.dispatcher.decide(request_id, "maybe")
        assert not bad.accepted and "invalid decision" in bad.message
        unknown = await rig.dispatcher.decide(
            "req-nope", "allow", session_id=session.session_id, tool_use_id="tu_i"
        )
        assert not unknown.accepted and "unknown request id" in unknown.message
        escape = await rig.dispatcher.decide(
            request_id, "allow_with_edits", edited_input={"path": "../../etc/x", "content": "1"}
        )
        assert not escape.accepted and "escapes the workspace" in escape.message
        schema = await rig.dispatcher.decide(
            request_id, "allow_with_edits", edited_input={"path": "i.txt"}
        )
        assert not schema.accepted and "content" in schema.message
        # Rejected updates leave no trace in the workflow history.
        assert await update_events(handle) == []
        assert (await rig.dispatcher.status(session.session_id, "tu_i")).status == "parked"

        ok = await rig.dispatcher.decide(
            request_id,
            "allow_with_edits",
            edited_input={"path": "i.txt", "content": "edited"},
            decided_by="carol",
        )
        assert ok.accepted
        assert ok.winner and ok.winner.approved_hash == input_hash(
            "write_file", {"path": "i.txt", "content": "edited"}
        )
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "i.txt").read_text() == "edited"
        row = await sqlite_repo.get_call(session.session_id, "tu_i")
        assert row.input == {"path": "i.txt", "content": "edited"}
        assert row.input_hash == ok.winner.approved_hash


async def test_cancel_while_parked_never_executes(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_k", name="write_file", input={"path": "k.txt", "content": "k"})
        handle = await rig.dispatcher.start(call, session)
        await rig.wait_parked(session.session_id, "tu_k")
        await rig.dispatcher.cancel(session.session_id, "tu_k")
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.CANCELLED
        assert outcome.status == CallStatus.CANCELLED
        assert not (rig.workspace / "k.txt").exists()
        row = await sqlite_repo.get_call(session.session_id, "tu_k")
        assert row.status == CallStatus.CANCELLED


async def test_auto_write_with_permissive_policy(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path, policy=AUTO_ALL) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_aw", name="write_file", input={"path": "a.txt", "content": "A"})
        outcome = await rig.dispatcher.dispatch_outcome(call, session)
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "a.txt").read_text() == "A"
        row = await sqlite_repo.get_call(session.session_id, "tu_aw")
        assert row.full_output is not None


async def test_failing_webhook_never_blocks_the_call(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    from parkgate.runtime.ports import free_port

    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, webhooks=[{"url": dead}]
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_n", name="write_file", input={"path": "n.txt", "content": "n"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_n")
        await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="dana")
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "n.txt").read_text() == "n"
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in handle.fetch_history_events()
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert "parkgate.notify" in scheduled
        # The webhook was still retrying when the call ended: it is cancelled, not
        # left running against a finished call.
        cancel_requested = [
            e
            async for e in handle.fetch_history_events()
            if e.HasField("activity_task_cancel_requested_event_attributes")
        ]
        assert len(cancel_requested) == 1


async def test_decide_without_waiting_and_the_retired_signal(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """wait=False answers once the update is accepted; a `decide` signal, even
    proven, is ignored (issue 37: its proof check would replay with the
    replaying worker's keys)."""
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_s", name="write_file", input={"path": "s.txt", "content": "s"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_s")
        proven = rig.dispatcher.proven(
            DecideInput(request_id=request_id, decision="deny", decided_by="sig"),
            call_workflow_id(session.session_id, "tu_s"))
        await handle.signal(SIGNAL_DECIDE, proven)
        # An invalid decision is refused by the validator: the call stays parked.
        refused = await rig.dispatcher.decide(request_id, "perhaps", wait=False)
        assert not refused.accepted and refused.reason == "invalid_decision"
        assert (await rig.dispatcher.status(session.session_id, "tu_s")).status == "parked"
        sent = await rig.dispatcher.decide(request_id, "allow", decided_by="eve", via="slack",
                                           wait=False)
        assert sent.accepted
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED
        assert outcome.decision and outcome.decision.via == "slack"
        assert outcome.decision.decided_by == "eve"


async def test_never_expiring_class_waits_a_month(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, approval_expiry_by_class={"execute": 0}
    ) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_nv", name="shell", input={"command": "echo late > late.txt"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_nv")
        assert (await rig.dispatcher.status(session.session_id, "tu_nv")).expires_at is None
        await temporal_env.sleep(30 * 24 * 3600)
        assert (await rig.dispatcher.status(session.session_id, "tu_nv")).status == "parked"
        await rig.dispatcher.resolve_confirmation(request_id, "allow")
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "late.txt").read_text().strip() == "late"


async def test_a_pending_webhook_notice_is_cancelled_when_the_call_ends(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The notice's activity must not outlive its call: a webhook that never answers
    keeps it in flight, and the call ending requests its cancellation.

    Runs on the dev server: the time-skipping test server keeps time skipping
    locked for an activity whose cancellation it saw after its workflow closed,
    which would stall every later timer test of the session.
    """
    client = await dev_client(dev_server)
    accepted: list[asyncio.StreamWriter] = []

    async def hang(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # never answers

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with durable_rig(
            client,
            sqlite_repo,
            tmp_path,
            webhooks=[{"url": f"http://127.0.0.1:{port}/hook"}],
        ) as rig:
            session = rig.session()
            call = ToolUseBlock(
                id="tu_h", name="write_file", input={"path": "h.txt", "content": "h"}
            )
            handle = await rig.dispatcher.start(call, session)
            request_id = await rig.wait_parked(session.session_id, "tu_h")
            for _ in range(200):  # the notice is on its way to the webhook
                if accepted:
                    break
                await asyncio.sleep(0.05)
            assert accepted, "the webhook was never called"
            await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="dana")
            outcome = await handle.result()
            assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
            history = await handle.fetch_history()
            for writer in accepted:  # lets the abandoned attempt end; the worker can stop
                writer.close()
    finally:
        for writer in accepted:
            writer.close()
        server.close()
    events = list(history.events)
    notify_ids = {
        e.event_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "parkgate.notify"
    }
    assert len(notify_ids) == 1
    cancel_requested = {
        e.activity_task_cancel_requested_event_attributes.scheduled_event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED
    }
    assert notify_ids <= cancel_requested
    # The patched branch replays deterministically.
    replayed = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
