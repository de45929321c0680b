"""Execution of ToolCallWorkflow: run the tool in an activity, conclude.

A read (NONE/READ, not decided) runs as a local activity, anything else as the
at-most-once execute activity; grouped sessions run on their group's queue.
The activity usually records the outcome itself; `_conclude` records what it
could not. A non-atomic composed tool whose sub-call needs a human comes back
parked: the workflow waits for that decision in a SubCallApproval child
workflow (workflows/subcall_park.py), then runs the tool again, resumed.
`Execution` is built with the call's state and its recording part.
Deterministic code only.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TimeoutType,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import TimeoutError as TemporalTimeoutError

from parkgate.workflows.call_record import STORE_RETRY, STORE_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals.edits import edit_note
    from parkgate.calls.cancellation import Cancellation
    from parkgate.calls.records import CallStatus, status_for
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import (
        SUBCALL_WORKFLOW,
        WORKER_LOST_TEXT,
        CallOutcome,
        ExecPlan,
        ExecuteInput,
        ExecuteOutput,
        RecordInput,
        SubCallApprovalInput,
        SubCallDecided,
        SubCallPark,
        call_workflow_id,
    )
    from parkgate.models import ToolErrorClass
    from parkgate.verdicts import PreparedCall

if TYPE_CHECKING:
    from parkgate.workflows.call_record import CallRecording
    from parkgate.workflows.call_state import CallState

#: Margin added to the tool timeout: the pipeline enforces the tool timeout and
#: the cancel grace itself; Temporal's start-to-close is the outer backstop.
_EXECUTE_MARGIN = timedelta(seconds=45)
#: workflow.patched id: a composed tool's run came back parked at a sub-call.
PATCH_SUB_CALL_PARKS = "sub-call-parks"
#: workflow.patched id: a call run with approver-edited input tells the model so.
PATCH_EDIT_NOTE = "approver-edit-note"


class Execution:
    """ToolCallWorkflow's part that runs an allowed call and concludes its outcome."""

    def __init__(self, state: CallState, rec: CallRecording) -> None:
        self.state = state
        self.rec = rec

    async def execute(
        self,
        prepared: PreparedCall,
        approved_hash: str,
        plan: ExecPlan,
    ) -> CallOutcome:
        """Run the tool: local activity for NONE/READ, at-most-once activity otherwise."""
        self.state.status = CallStatus.RUNNING
        # A decided call runs as a regular activity: it is scheduled only when
        # the workflow task that accepted the decision commits, and it writes
        # tool.confirmation_resolved before the tool starts (no extra step).
        decided = self.state.committed_writes is True and self.state.info is not None
        inp = ExecuteInput(
            prepared=prepared,
            approved_hash=approved_hash,
            workflow_id=workflow.info().workflow_id,
            ref=self.rec.ref(),
            request_id=self.rec.request_id(),
            resolved=self.state.unwritten_resolution if decided else None,
            # Histories from before carried no such field: it changes no command.
            park_sub_calls=bool(prepared.definition.composed_of) and not prepared.definition.atomic,
            edit_note=self._edit_note(prepared),
        )
        try:
            out = await self._run_tool(inp, plan, decided)
            while out.parked is not None:
                # Only runs whose composed tool parked reach this (never older ones).
                workflow.patched(PATCH_SUB_CALL_PARKS)
                sub_decided = await self._wait_sub_call(out.parked)
                inp = inp.model_copy(update={
                    "steps": out.parked.steps,
                    "sub_decided": sub_decided,
                    "resolved": None if out.resolved_recorded else inp.resolved,
                })
                out = await self._run_tool(inp, plan, decided)
        except ActivityError as exc:
            # The resolution may not be stored: _finish writes it (idempotently).
            # The lost activity may have finished and recorded its outcome before
            # it died: that record stands (never both tool.completed and failed).
            cancel = self.rec.cancellation() if isinstance(exc.cause, CancelledError) else None
            return await self.rec.finish(
                self._activity_failure(exc, cancel), event="tool.failed", unless_finished=True,
                data=cancel.details() if cancel else None,
            )
        if out.resolved_recorded:
            self.state.unwritten_resolution = None
        return await self.conclude(out)

    def _edit_note(self, prepared: PreparedCall) -> str | None:
        """What the approver changed, for the model (None unless an edit changed
        the input; runs recorded before the note get none, as they ran)."""
        decision = self.state.decision
        if decision is None or decision.decision != "allow_with_edits":
            return None
        note = edit_note(self.state.input.call.input, prepared.call.input)
        if note is None or not workflow.patched(PATCH_EDIT_NOTE):
            return None
        return note

    async def _wait_sub_call(self, park: SubCallPark) -> SubCallDecided:
        """Wait durably for the decision on the sub-call the run parked at (a
        child workflow with the sub-call's own call id, decided like a call)."""
        if park.pending_events:
            # Events the store could not take before the park: recorded first.
            await workflow.execute_activity(
                acts.record_committed, RecordInput(events=park.pending_events),
                start_to_close_timeout=STORE_TIMEOUT, retry_policy=STORE_RETRY,
            )
        prepared = park.sub.prepared
        child_id = call_workflow_id(prepared.session.session_id, prepared.call.id)
        try:
            decided: SubCallDecided = await workflow.execute_child_workflow(
                SUBCALL_WORKFLOW,
                SubCallApprovalInput(sub=park.sub, expiry_seconds=park.expiry_seconds),
                id=child_id,
                result_type=SubCallDecided,
            )
        except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError("cancelled while a sub-call waited") from exc
            workflow.logger.error("sub-call approval %s failed: %s", child_id, exc)
            return SubCallDecided(request_id=park.sub.info.request_id, decision="failed",
                                  reason=type(exc).__name__,
                                  input_hash=prepared.input_hash)
        if decided.decision == "cancelled":
            # The wait ends with the call (a cancellation reaches the child, which
            # records it and returns): nothing more of the composed tool runs.
            raise asyncio.CancelledError("cancelled while a sub-call waited for approval")
        return decided

    async def _run_tool(self, inp: ExecuteInput, plan: ExecPlan, decided: bool) -> ExecuteOutput:
        """One run of the tool: local activity for reads, at-most-once activity otherwise."""
        prepared = inp.prepared
        start_to_close = timedelta(seconds=plan.start_to_close_seconds) + _EXECUTE_MARGIN
        queue = self.rec.group_queue()
        local = plan.local and not prepared.definition.side_effects.mutates and not decided
        if local and queue is not None:
            # A read for a grouped session: idempotent like the local
            # activity, but on the hosts that have the workspace.
            out = await workflow.execute_activity(
                acts.execute_local,
                inp,
                task_queue=queue,
                start_to_close_timeout=start_to_close,
                retry_policy=RetryPolicy(maximum_attempts=2),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        elif local:
            out = await workflow.execute_local_activity(
                acts.execute_local,
                inp,
                start_to_close_timeout=start_to_close,
                retry_policy=RetryPolicy(maximum_attempts=2),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        else:
            out = await workflow.execute_activity(
                acts.execute,
                inp,
                # None: the workflow's own (main) queue, as before groups.
                task_queue=queue,
                start_to_close_timeout=start_to_close,
                heartbeat_timeout=timedelta(seconds=plan.heartbeat_timeout_seconds),
                retry_policy=RetryPolicy(maximum_attempts=1),
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        return out

    async def conclude(self, out: ExecuteOutput) -> CallOutcome:
        """The outcome of a run; recorded here only if the activity could not."""
        outcome = CallOutcome(
            result=out.result,
            status=status_for(out.error_class),
            error_class=out.error_class,
            request_id=self.rec.request_id(),
            decision=self.state.decision,
            duration_ms=out.duration_ms,
        )
        if out.recorded:
            # The activity stored the final row with the final event.
            self.state.status = outcome.status
            self.state.outcome = outcome
            return outcome
        # The activity recorded tool.called/completed/failed and the full
        # output, or they travel back in `out` (the store was down); the
        # workflow records them and the final row.
        return await self.rec.finish(
            outcome,
            event=None,
            started_at=out.started_at,
            carried=out.pending_events,
            full_output=out.full_output,
        )

    def _activity_failure(self, exc: ActivityError, cancel: Cancellation | None) -> CallOutcome:
        cause = exc.cause
        if isinstance(cause, CancelledError):
            return self.rec.error(ToolErrorClass.CANCELLED, "The call was cancelled while "
                                  f"running{cancel.suffix() if cancel else ''}.")
        if isinstance(cause, TemporalTimeoutError) and cause.type == TimeoutType.HEARTBEAT:
            return self.rec.error(ToolErrorClass.EXECUTION_ERROR, WORKER_LOST_TEXT)
        if isinstance(cause, TemporalTimeoutError):
            return self.rec.error(
                ToolErrorClass.EXECUTION_ERROR,
                f"{WORKER_LOST_TEXT} (execution exceeded its time limit: {cause.message})",
            )
        detail = cause.message if isinstance(cause, ApplicationError) else str(cause)
        return self.rec.error(
            ToolErrorClass.EXECUTION_ERROR,
            f"execution failed in the worker; outcome unknown ({detail})",
        )
