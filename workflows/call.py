"""ToolCallWorkflow: classify -> (park for a human) -> execute -> record, exactly once.

Deterministic code only: every decision that needs I/O (registry, policy,
filesystem, database, clock for tokens) happens in an activity and reaches the
workflow through history. The call ends with a `CallOutcome` whatever happens
(deny, expiry, cancellation, a lost worker); it never raises to its caller.

Changing this file: a parked call may sit in history for days, so any change
that alters the sequence of commands must be guarded with
`workflow.patched("<id>")` (see docs/DURABLE.md) and the replay tests in
tests/histories/ must keep passing.

The class is thin: it holds the call's state and its main path (`_run`) and
composes one part per concern, each a mixin over `CallRecording` (the state's
types and the store writes, call_record.py): `Decisions` (the decide update
and signal, quorum; call_decide.py), `Parking` (the approval request, the wait,
the resolution; call_park.py), `Notices` (webhook, reminders, Slack;
call_notices.py), `Execution` (the execute activities; call_exec.py) and
`ClientExecution` (a client tool's release/claim/outcome; client_exec.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

from parkgate.workflows.call_decide import Decisions
from parkgate.workflows.call_exec import Execution
from parkgate.workflows.call_notices import Notices
from parkgate.workflows.call_park import Parking
from parkgate.workflows.call_record import CLASSIFY_RETRY
from parkgate.workflows.client_exec import (
    PATCH_CLAIM_RESERVATION,
    PATCH_JCS_INPUT_SHA256,
    ClientExecution,
)

with workflow.unsafe.imports_passed_through():
    from parkgate.calls.records import CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable import workflow_defn
    from parkgate.durable.payloads import (
        CALL_WORKFLOW,
        QUERY_STATUS,
        CallInput,
        CallOutcome,
        CallStatusView,
        ClassifyInput,
        StatusRequest,
    )
    from parkgate.models import ToolErrorClass
    from parkgate.verdicts import Deny, Execute

#: classify runs an auto-approved local (NONE/READ) tool in the same local
#: activity when the tool's time limit fits in this one (see ClassifyInput.run_row).
_CLASSIFY_TIMEOUT = timedelta(minutes=3)


# Validated once per process, not once per run (parkgate.durable.workflow_defn).
@workflow_defn.defn(name=CALL_WORKFLOW)
class ToolCallWorkflow(Decisions, Parking, Notices, Execution, ClientExecution):
    """One tool call, from classification to its recorded outcome (a client
    tool's call is released to its client instead: `ClientExecution`)."""

    @workflow.init
    def __init__(self, inp: CallInput) -> None:
        self._input = inp
        self._status = CallStatus.QUEUED
        self._prepared = None
        self._info = None
        self._approval = None
        self._approval_url = None
        self._decision = None
        #: Quorum requests: named approvers who have allowed so far (see _tally).
        self._votes = []
        #: Set while an accepted update is revalidating edits (old histories).
        self._deciding = False
        #: Serializes applying decisions (an update may await revalidation).
        self._decide_lock = asyncio.Lock()
        #: Accepted decide updates/signals not finished yet: expiry waits for them.
        self._pending_decisions = 0
        #: PATCH_COMMITTED_WRITES, once asked (None before the call parks).
        self._committed_writes = None
        #: The resolution not yet written (patched path): goes with the next write.
        self._unwritten_resolution = None
        self._outcome = None
        self._background = []
        #: Patch "cancel-notify-on-end": a call's end cancels its pending webhook.
        self._cancel_notify_on_end = False
        #: The call's Slack message once posted (ApprovalCreated.slack).
        self._slack_message = None
        self._slack = False
        #: A cancellation swallowed while a store write finished (see _record_raw).
        self._cancel_requested = False
        self._verdict = None
        #: PATCH_PROVEN_DECISIONS, once asked.
        self._proven_signals = None
        #: PATCH_DECIDE_SIGNAL_RETIRED, once asked.
        self._retired_signals = None
        self._init_client()

    # ------------------------------------------------------------------ run
    @workflow.run
    async def run(self, inp: CallInput) -> CallOutcome:
        try:
            outcome = await self._run(inp)
        except asyncio.CancelledError:
            # Cancelled before execution started (classifying or parked), or
            # just as a run's result arrived: when both reach the workflow in
            # one activation the SDK raises the cancellation and drops the
            # result, although the activity ran the tool and stored its
            # outcome. A stored outcome stands (`unless_finished`, a field of
            # the record activity's input: the commands are unchanged).
            # An unstarted reservation never ran (its holder had not begun).
            ran = self._status in (CallStatus.RUNNING, CallStatus.CLAIMED) \
                and (self._claim is None or self._claim.started)
            if self._info is not None and self._uses_committed_writes():
                self._cancelled_while_parked()
            text = f"The call was cancelled {'while running' if ran else 'before it ran'}."
            outcome = await self._finish(
                self._error(ToolErrorClass.CANCELLED, text),
                event="tool.failed",
                unless_finished=True,
            )
        await self._stop_background()
        await self._slack_outcome(outcome)
        self._outcome = outcome
        # Let a decide update still in flight answer its caller (Temporal's
        # documented rule: never return while a handler is running).
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    async def _run(self, inp: CallInput) -> CallOutcome:
        # In the first activation, never after a local activity (docs/DURABLE.md);
        # only calls started with a client tool can be released.
        self._jcs_input_sha256 = inp.client_tool is not None \
            and workflow.patched(PATCH_JCS_INPUT_SHA256)
        self._reserving = inp.client_tool is not None \
            and workflow.patched(PATCH_CLAIM_RESERVATION)
        # An auto-approved read runs inside classify (one local activity, one
        # history write); anything else comes back as a verdict to act on.
        classify_input = ClassifyInput(call=inp.call, session=inp.session, ref=self._ref(),
                                       client_tool=inp.client_tool, claim=inp.claim)
        queue = self._group_queue()
        try:
            if queue is not None:
                # The session's workspace lives on its group's hosts: classify
                # (realpath, symlinks) there. Sessions without a group keep the
                # local activity, so their histories replay unchanged.
                classified = await workflow.execute_activity(
                    acts.classify,
                    classify_input,
                    task_queue=queue,
                    start_to_close_timeout=_CLASSIFY_TIMEOUT,
                    retry_policy=CLASSIFY_RETRY,
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            else:
                classified = await workflow.execute_local_activity(
                    acts.classify,
                    classify_input,
                    start_to_close_timeout=_CLASSIFY_TIMEOUT,
                    retry_policy=CLASSIFY_RETRY,
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError("cancelled while classifying") from exc
            workflow.logger.error("classify failed: %s", exc.cause)
            return await self._finish(
                self._error(
                    ToolErrorClass.EXECUTION_ERROR,
                    "The call could not be classified; it did not run.",
                ),
                event="tool.failed",
            )
        verdict = classified.verdict
        self._verdict = verdict.kind
        self._claim_checked = classified.claim_checked
        self._claim_unproven = classified.claim_problem
        self._unclaimed_seconds = classified.plan.unclaimed_seconds
        if isinstance(verdict, Deny):
            return await self._deny(verdict)
        self._prepared = verdict.prepared
        if isinstance(verdict, Execute):
            if self._is_client_call(verdict.prepared):
                return await self._release_call(verdict.prepared)
            if classified.executed is not None:
                self._status = CallStatus.RUNNING
                return await self._conclude(classified.executed)
            # The call's row is written by the execute activity with tool.called.
            return await self._execute(
                verdict.prepared, verdict.prepared.input_hash, classified.plan
            )
        # NeedsApproval
        self._info = verdict.info
        decision = await self._park(verdict.info, classified.plan)
        if decision is None:
            return await self._finish(
                self._error(
                    ToolErrorClass.CONFIRMATION_TIMEOUT,
                    "No decision before the approval request expired; the call did not run.",
                ),
                event="tool.failed",
            )
        if decision.decision == "deny":
            text = "User denied this operation."
            if decision.reason:
                text += f" Reason: {decision.reason}"
            return await self._finish(
                self._error(ToolErrorClass.USER_DENIED, text), event="tool.failed"
            )
        self._raise_if_cancelled()
        prepared = self._prepared
        assert prepared is not None
        if self._is_client_call(prepared):
            return await self._release_call(prepared)
        return await self._execute(prepared, decision.approved_hash or prepared.input_hash,
                                   classified.plan)

    @workflow.query(name=QUERY_STATUS)
    def status(self, _: StatusRequest) -> CallStatusView:
        """Where the call is now (state, request, expiry, decision, outcome)."""
        call, session = self._input.call, self._input.session
        approval = self._approval
        return CallStatusView(
            workflow_id=workflow.info().workflow_id,
            session_id=session.session_id,
            tool_use_id=call.id,
            tool_name=call.name,
            status=self._status,
            request=self._info,
            approval_url=self._approval_url,
            requested_at=approval.requested_at if approval else None,
            expires_at=approval.expires_at if approval else None,
            decision=self._decision,
            outcome=self._outcome,
            votes=list(self._votes),
            worker_group=session.worker_group,
            release=self._release_view(),
        )
