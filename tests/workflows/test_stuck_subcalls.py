"""A composed call's sub-call approval whose workflow task cannot heal (dev server).

The task healer sweeps SubCallApproval child workflows as it sweeps calls:
one whose task fails for a reason no retry fixes has its stored request
closed (`cancelled` by the task healer, with the reason, so no approver is
told a decision applied) and is terminated; its parent call then learns
the sub-call will not run and ends. Before, the child was not swept: the
parent waited on it forever and the request stayed in every inbox.

The wedge is a key rotation done wrong: the call and its sub-call's approval
were recorded under one payload key; the worker that replays them has only
another (the child replays when a message reaches it, and cannot read its
own input).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus

from parkgate.approvals.decisions import DecideInput
from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import SIGNAL_DECIDE, SUBCALL_WORKFLOW, call_workflow_id
from parkgate.durable.stuck import healing
from parkgate.durable.stuck_subcall import HEALED, HEALER
from parkgate.models import ToolUseBlock
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import dev_client, durable_rig
from tests.workflows.test_composed import PARENT_AUTO, TwoWrites, wait_request
from tests.workflows.test_stuck_calls import FAST, foreign_client, until

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(180)]


async def test_a_sub_call_approval_that_cannot_heal_is_closed_and_its_call_ends(
    dev_server: DevServer, pg_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    async with durable_rig(client, pg_repo, tmp_path, policy=PARENT_AUTO,
                           extra_tools=[TwoWrites]) as rig:
        queue = rig.settings.temporal_task_queue
        session = rig.session("s-subwedge")
        sid = session.session_id
        await rig.dispatcher.start(
            ToolUseBlock(id="tu_w", name="two_writes", input={"text": "x"}), session)
        request = await wait_request(pg_repo, sid, "tu_w.1", timeout=60)
    child_id = call_workflow_id(sid, "tu_w.1")
    desc = await client.get_workflow_handle(child_id).describe()
    assert desc.workflow_type == SUBCALL_WORKFLOW
    assert desc.status == WorkflowExecutionStatus.RUNNING

    # The same queue, served by a worker whose only payload key is another one.
    foreign = await foreign_client(dev_server)
    async with durable_rig(foreign, pg_repo, tmp_path, policy=PARENT_AUTO,
                           extra_tools=[TwoWrites], temporal_task_queue=queue, **FAST) as rig2:
        # A message makes the child replay on that worker: its input cannot be read.
        await foreign.get_workflow_handle(child_id).signal(
            SIGNAL_DECIDE, DecideInput(request_id=request, decision="allow", decided_by="x"))
        async with healing(foreign, rig2.settings, pg_repo) as healer:
            assert healer is not None

            async def closed() -> Any:
                approval = await pg_repo.get_approval(request)
                return approval if approval.decision is not None else None

            approval = await until(closed, "the healer closes the sub-call's request")

            async def parent_ended() -> Any:
                row = await pg_repo.get_call(sid, "tu_w")
                return row if row is not None and row.status.terminal else None

            parent = await until(parent_ended, "the parent call ends")

    # The request is closed, by the healer, with the reason: no approver can be
    # told a decision applied, and no inbox lists it.
    assert (approval.decision, approval.via, approval.decided_by) == (HEALED, HEALER, None)
    assert "cannot be decoded" in (approval.reason or "")
    waiting = await pg_repo.waiting_approvals(session_id=sid)
    assert request not in [w.approval.request_id for w in waiting]
    events = [e.event for e in await pg_repo.timeline(sid, "tu_w")]
    [resolved] = [e for e in events if e.type == "tool.confirmation_resolved"
                  and e.tool_use_id == "tu_w.1"]
    assert resolved.request_id == request and resolved.parent_tool_use_id == "tu_w"
    assert resolved.data["decision"] == HEALED and resolved.data["via"] == HEALER
    # Nothing of the composed tool ran after the park; the child was terminated.
    assert not any(e.type == "tool.called" and e.tool_use_id == "tu_w.1" for e in events)
    assert not (rig.workspace / "first.txt").exists()
    child = await client.get_workflow_handle(child_id).describe()
    assert child.status == WorkflowExecutionStatus.TERMINATED
    # The parent, replayed on the same worker, could not be read either: ended too.
    assert parent.status == CallStatus.FAILED
    assert parent.result is not None and "cannot be decoded" in parent.result.text
    assert (await pg_repo.verify_chain(sid)).ok
    assert (await pg_repo.verify_meaning(sid)).ok
