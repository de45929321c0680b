"""A decision admitted while the workflow has not yet heard that its approval
request was stored (docs/FAULTS.md, finding 11).

`create_approval` writes the parked row before the workflow task that reports
its result runs, so a human can decide in between (under worker crashes that
task can wait a long time). That task then carries the activity's result and
the `decide` update together. This test builds it for real on the dev server:
a workflow-only worker parks the call and stops, an activity-only worker stores
the request, the update is admitted while no worker runs workflows, then a
fresh worker runs the task. The call must end as decided, once, and its
history must replay.

Here the live run handles the update and the result in one activation, as a
replay does. Finding 11 is the other case (the live run resumed `run` first,
the replay handled the update first): not reproduced deterministically yet.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage as _STAGE
from temporalio.api.update.v1 import Input, Meta, Request, UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    PollWorkflowExecutionUpdateRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from parkgate.approvals.decisions import DecideInput, RejectReason
from parkgate.calls.records import CallStatus
from parkgate.durable import deciding
from parkgate.durable.deciding import ParkNotSettled
from parkgate.durable.payloads import ACT_CREATE_APPROVAL, UPDATE_DECIDE
from parkgate.models import ToolUseBlock
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.worker import build_worker
from tests.fixtures.temporal import DurableRig, dev_client, durable_rig, replayer

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]

#: A short sticky timeout: the stopped worker's tasks move on quickly.
_STICKY = timedelta(seconds=1)


async def _until(what: str, check: Any, timeout: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _scheduled(handle: WorkflowHandle[Any, Any], activity: str) -> bool:
    desc = await handle.describe()
    return any(p.activity_type.name == activity
               for p in desc.raw_description.pending_activities)


async def _admit_decision(
    client: Client, rig: DurableRig, handle: WorkflowHandle[Any, Any], inp: DecideInput
) -> asyncio.Task[Any]:
    """Send the `decide` update (as the API does, proven) and return once the
    server has admitted it; no worker runs workflows now, so its answer waits
    (the returned task)."""
    proven = rig.dispatcher.proven(inp, handle.id)
    payloads = await client.data_converter.encode([proven])
    update_id = f"race-{uuid.uuid4().hex[:8]}"
    execution = WorkflowExecution(workflow_id=handle.id)
    sent = asyncio.create_task(client.workflow_service.update_workflow_execution(
        UpdateWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=execution,
            wait_policy=WaitPolicy(lifecycle_stage=_STAGE.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED),
            request=Request(
                meta=Meta(update_id=update_id, identity="test"),
                input=Input(name=UPDATE_DECIDE, args=Payloads(payloads=payloads)),
            ),
        )
    ))

    async def admitted() -> bool:
        if sent.done():
            sent.result()  # an error surfaces here
        try:
            await client.workflow_service.poll_workflow_execution_update(
                PollWorkflowExecutionUpdateRequest(
                    namespace=client.namespace,
                    update_ref=UpdateRef(workflow_execution=execution, update_id=update_id),
                    wait_policy=WaitPolicy(lifecycle_stage=_STAGE.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED),
                ),
                timeout=timedelta(seconds=2),
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    await _until("the update admitted", admitted)
    return sent


def _same_task(events: list[Any]) -> bool:
    """create_approval's completion and the update's acceptance were answered by
    one workflow task (no task completed between them)."""
    done = accepted = None
    for i, event in enumerate(events):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED and done is None:
            done = i
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            accepted = i
            break
    if done is None or accepted is None:
        return False
    between = events[done:accepted]
    completed = [e for e in between
                 if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    return len(completed) == 1  # the task that accepted the update


@asynccontextmanager
async def _stored_but_unheard(
    client: Client, rig: DurableRig, repo: Any, call: ToolUseBlock
) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], Any]]:
    """A call whose approval request is stored (its row says parked) while the
    workflow task that reports it waits for a workflow worker: yields its
    handle and row, with an activity-only worker running."""
    session = rig.session()
    # 1. Workflows only: the call is classified and create_approval scheduled.
    async with build_worker(client, rig.settings, rig.deps, no_remote_activities=True,
                            sticky_queue_schedule_to_start_timeout=_STICKY):
        handle = await rig.dispatcher.start(call, session)
        await _until("create_approval scheduled",
                     lambda: _scheduled(handle, ACT_CREATE_APPROVAL))
    # 2. Activities only: the request is stored, the row says parked; the
    # workflow task that reports it waits for a workflow worker.
    async with build_worker(client, rig.settings, rig.deps, workflows=[]):
        async def parked() -> Any:
            row = await repo.get_call(session.session_id, call.id)
            return row if row is not None and row.status == CallStatus.PARKED else None

        yield handle, await _until("the parked row", parked)


async def test_decision_in_the_task_that_learns_the_request_was_stored_replays(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, run_worker=False) as rig:
        call = ToolUseBlock(id="tu_race", name="write_file",
                            input={"path": "race.txt", "content": "once"})
        # 1.-2. The request stored; the task that reports it not run yet.
        async with _stored_but_unheard(client, rig, sqlite_repo, call) as (handle, row):
            # 3. A human decides from the stored request; no worker runs workflows.
            decided = await _admit_decision(client, rig, handle, DecideInput(
                request_id=row.request_id, decision="allow", decided_by="alice", via="api"))
        # 4. A fresh worker runs the task: the result and the update together.
        async with build_worker(client, rig.settings, rig.deps):
            outcome = await asyncio.wait_for(handle.result(), 60)
            await decided
        history = await handle.fetch_history()

    assert _same_task(list(history.events)), "the race was not built: no shared task"
    assert outcome.status == CallStatus.SUCCEEDED, outcome
    assert (rig.workspace / "race.txt").read_text() == "once"
    replay = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None, replay.replay_failure


async def test_a_decision_waits_for_the_park_in_history_and_never_shares_its_task(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's own path (DurableDispatcher.send_decision): while the task that
    learns the request was stored is not done (no worker runs workflows), the
    decision is refused as ParkNotSettled (the API's 503, retry) instead of
    being sent into that task; once a worker has run it, the same decision
    goes through, in a task of its own."""
    monkeypatch.setattr(deciding, "_SETTLE_SECONDS", 6.0)  # its wait, shortened
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, run_worker=False) as rig:
        call = ToolUseBlock(id="tu_settle", name="write_file",
                            input={"path": "settle.txt", "content": "once"})
        async with _stored_but_unheard(client, rig, sqlite_repo, call) as (handle, row):
            pass
        with pytest.raises(ParkNotSettled):
            await rig.dispatcher.decide(row.request_id, "allow", decided_by="alice")
        history = await handle.fetch_history()
        assert not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED
                       or e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED
                       for e in history.events)
        async with build_worker(client, rig.settings, rig.deps):
            result = await rig.dispatcher.decide(row.request_id, "allow", decided_by="alice")
            assert result.accepted, result
            outcome = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()

    assert not _same_task(list(history.events))
    assert outcome.status == CallStatus.SUCCEEDED, outcome
    assert (rig.workspace / "settle.txt").read_text() == "once"
    replay = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None, replay.replay_failure


async def test_a_late_decision_on_an_ended_call_needs_no_worker(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decider who comes after the call ended is told so (409 at the API), not
    503 until it gives up: a query of a closed workflow is answered only by a
    worker replaying all of its history, which may not come (workers busy or
    being killed; the decision storm lost an allow_with_edits decider to 180 s
    of 503s). The workflow's end is the server's to say, and the store has the
    winner: the refusal names it (`parkgate decide` too, not only the API)."""
    monkeypatch.setattr(deciding, "_SETTLE_SECONDS", 6.0)  # its wait, shortened
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, run_worker=False) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_late", name="write_file",
                            input={"path": "late.txt", "content": "x"})
        async with build_worker(client, rig.settings, rig.deps):
            handle = await rig.dispatcher.start(call, session)
            request_id = await rig.wait_parked(session.session_id, "tu_late")
            won = await rig.dispatcher.decide(request_id, "allow", decided_by="alice")
            assert won.accepted, won
            await asyncio.wait_for(handle.result(), 60)
        # No worker polls now: nothing can replay the closed workflow.
        late = await asyncio.wait_for(
            rig.dispatcher.decide(request_id, "allow_with_edits", decided_by="bob",
                                  edited_input={"path": "late.txt", "content": "y"}), 30)
    assert not late.accepted, late
    # The stored request names the winner, as a live call's refusal does.
    assert late.reason == RejectReason.ALREADY_DECIDED, late
    assert late.winner is not None and late.winner.decided_by == "alice", late
    assert (rig.workspace / "late.txt").read_text() == "x"
