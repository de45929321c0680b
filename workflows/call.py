"""ToolCallWorkflow: classify -> (park for a human) -> execute -> record, exactly once.

Deterministic code only: every decision that needs I/O (registry, policy,
filesystem, database, clock for tokens) happens in an activity and reaches the
workflow through history. The call ends with a `CallOutcome` whatever happens
(deny, expiry, cancellation, a lost worker); it never raises to its caller.

Changing this file: a parked call may sit in history for days, so any change
that alters the sequence of commands must be guarded with
`workflow.patched("<id>")` (see docs/DURABLE.md) and the replay tests in
tests/histories/ must keep passing.

The class is thin: it holds the call's main path (`_run`), its handlers, and
one object per concern, all built in `__init__` around one `CallState`
(call_state.py), the only place the call's state lives: `CallRecording` (the
call's ids, events and store writes; call_record.py), which every other part
receives, `Notices` (webhook, reminders, Slack; call_notices.py), `Decisions`
(the decide update and signal, quorum; call_decide.py), `Parking` (the
approval request, the wait, the resolution; call_park.py), `Execution` (the
execute activities; call_exec.py), `ClientExecution` (a client tool's
release, claim and outcome; client_exec.py) and `ClientUpdates` (its claim,
start_claim and report_outcome updates; client_updates.py).

Parts are plain objects, not mixins: each is constructed with the state and
the parts it calls, so its signature says what it depends on, and the state's
fields are declared once (they used to be annotated on the mixins' common
base and again on the client path's). Temporal finds handlers on the workflow
class, so the update, signal and query handlers and their validators are
methods here, each a line handing its input to its part; the decorators, the
handler names and the payload types are where they were, so the workflow's
shape and commands are unchanged.
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
from parkgate.workflows.call_record import CLASSIFY_RETRY, CallRecording
from parkgate.workflows.call_state import CallState
from parkgate.workflows.client_exec import (
    PATCH_CLAIM_RESERVATION,
    PATCH_JCS_INPUT_SHA256,
    ClientExecution,
)
from parkgate.workflows.client_updates import ClientUpdates

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals.decisions import DecideInput
    from parkgate.calls.records import CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable import workflow_defn
    from parkgate.durable.client_payloads import (
        UPDATE_CLAIM,
        UPDATE_OUTCOME,
        UPDATE_START,
        ClaimInput,
        ClaimResult,
        OutcomeInput,
        OutcomeResult,
        StartInput,
    )
    from parkgate.durable.payloads import (
        CALL_WORKFLOW,
        QUERY_STATUS,
        SIGNAL_DECIDE,
        UPDATE_DECIDE,
        CallInput,
        CallOutcome,
        CallStatusView,
        ClassifyInput,
        DecideResult,
        StatusRequest,
    )
    from parkgate.models import ToolErrorClass
    from parkgate.verdicts import Deny, Execute

#: classify runs an auto-approved local (NONE/READ) tool in the same local
#: activity when the tool's time limit fits in this one (see ClassifyInput.run_row).
_CLASSIFY_TIMEOUT = timedelta(minutes=3)


# Validated once per process, not once per run (parkgate.durable.workflow_defn).
@workflow_defn.defn(name=CALL_WORKFLOW)
class ToolCallWorkflow:
    """One tool call, from classification to its recorded outcome (a client
    tool's call is released to its client instead: `ClientExecution`)."""

    @workflow.init
    def __init__(self, inp: CallInput) -> None:
        self.state = state = CallState(inp)
        self._rec = rec = CallRecording(state)
        self._notices = notices = Notices(state)
        self._decisions = Decisions(state, rec)
        self._parking = Parking(state, rec, notices)
        self._execution = Execution(state, rec)
        self._client = client = ClientExecution(state, rec)
        self._client_updates = ClientUpdates(state, rec, client)

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
            ran = self.state.status in (CallStatus.RUNNING, CallStatus.CLAIMED) \
                and (self.state.claim is None or self.state.claim.started)
            if self.state.info is not None and self._rec.uses_committed_writes():
                self._parking.cancelled_while_parked()
            # Who asked and why come from the cancel request in history: a
            # request without them (every one before they were sent) records
            # the text and event it always did. No command changes.
            cancel = self._rec.cancellation()
            text = f"The call was cancelled {'while running' if ran else 'before it ran'}" \
                f"{cancel.suffix() if cancel else ''}."
            outcome = await self._rec.finish(
                self._rec.error(ToolErrorClass.CANCELLED, text),
                event="tool.failed",
                unless_finished=True,
                data=cancel.details() if cancel else None,
            )
        await self._notices.stop_background()
        await self._notices.slack_outcome(outcome)
        self.state.outcome = outcome
        # Let a decide update still in flight answer its caller (Temporal's
        # documented rule: never return while a handler is running).
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    async def _run(self, inp: CallInput) -> CallOutcome:
        # In the first activation, never after a local activity (docs/DURABLE.md);
        # only calls started with a client tool can be released.
        self.state.jcs_input_sha256 = inp.client_tool is not None \
            and workflow.patched(PATCH_JCS_INPUT_SHA256)
        self.state.reserving = inp.client_tool is not None \
            and workflow.patched(PATCH_CLAIM_RESERVATION)
        # An auto-approved read runs inside classify (one local activity, one
        # history write); anything else comes back as a verdict to act on.
        classify_input = ClassifyInput(call=inp.call, session=inp.session, ref=self._rec.ref(),
                                       client_tool=inp.client_tool, claim=inp.claim)
        queue = self._rec.group_queue()
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
            return await self._rec.finish(
                self._rec.error(
                    ToolErrorClass.EXECUTION_ERROR,
                    "The call could not be classified; it did not run.",
                ),
                event="tool.failed",
            )
        verdict = classified.verdict
        self.state.verdict = verdict.kind
        self.state.claim_checked = classified.claim_checked
        self.state.claim_unproven = classified.claim_problem
        self.state.unclaimed_seconds = classified.plan.unclaimed_seconds
        if isinstance(verdict, Deny):
            return await self._rec.deny(verdict)
        self.state.prepared = verdict.prepared
        if isinstance(verdict, Execute):
            if self._client.is_client_call(verdict.prepared):
                return await self._client.release_call(verdict.prepared)
            if classified.executed is not None:
                self.state.status = CallStatus.RUNNING
                return await self._execution.conclude(classified.executed)
            # The call's row is written by the execute activity with tool.called.
            return await self._execution.execute(
                verdict.prepared, verdict.prepared.input_hash, classified.plan
            )
        # NeedsApproval
        self.state.info = verdict.info
        decision = await self._parking.park(verdict.info, classified.plan)
        if decision is None:
            return await self._rec.finish(
                self._rec.error(
                    ToolErrorClass.CONFIRMATION_TIMEOUT,
                    "No decision before the approval request expired; the call did not run.",
                ),
                event="tool.failed",
            )
        if decision.decision == "deny":
            text = "User denied this operation."
            if decision.reason:
                text += f" Reason: {decision.reason}"
            return await self._rec.finish(
                self._rec.error(ToolErrorClass.USER_DENIED, text), event="tool.failed"
            )
        self._rec.raise_if_cancelled()
        prepared = self.state.prepared
        assert prepared is not None
        if self._client.is_client_call(prepared):
            return await self._client.release_call(prepared)
        return await self._execution.execute(
            prepared, decision.approved_hash or prepared.input_hash, classified.plan)

    @workflow.query(name=QUERY_STATUS)
    def status(self, _: StatusRequest) -> CallStatusView:
        """Where the call is now (state, request, expiry, decision, outcome)."""
        call, session = self.state.input.call, self.state.input.session
        approval = self.state.approval
        return CallStatusView(
            workflow_id=workflow.info().workflow_id,
            session_id=session.session_id,
            tool_use_id=call.id,
            tool_name=call.name,
            status=self.state.status,
            request=self.state.info,
            approval_url=self.state.approval_url,
            requested_at=approval.requested_at if approval else None,
            expires_at=approval.expires_at if approval else None,
            decision=self.state.decision,
            outcome=self.state.outcome,
            votes=list(self.state.votes),
            worker_group=session.worker_group,
            release=self._client.release_view(),
        )

    # ----------------------------------------------- decisions (call_decide.py)
    @workflow.update(name=UPDATE_DECIDE)
    async def decide(self, inp: DecideInput) -> DecideResult:
        """Apply a decision; the first one wins and every later caller learns it."""
        return await self._decisions.decide(inp)

    @decide.validator
    def _validate_decide(self, inp: DecideInput) -> None:
        self._decisions.validate(inp)

    @workflow.signal(name=SIGNAL_DECIDE)
    async def decide_signal(self, inp: DecideInput) -> None:
        """Retired (PATCH_DECIDE_SIGNAL_RETIRED): logged and ignored, but for
        histories from before it (Decisions.decide_signal)."""
        await self._decisions.decide_signal(inp)

    # ------------------------------------- the client path (client_updates.py)
    @workflow.update(name=UPDATE_CLAIM)
    async def claim(self, inp: ClaimInput) -> ClaimResult:
        """The first claim wins a lease (or a reservation); later ones learn who claimed."""
        return await self._client_updates.claim(inp)

    @claim.validator
    def _validate_claim(self, inp: ClaimInput) -> None:
        self._client_updates.validate_claim(inp)

    @workflow.update(name=UPDATE_START)
    async def start_claim(self, inp: StartInput) -> ClaimResult:
        """The holder of a reservation runs the call now: its lease begins."""
        return await self._client_updates.start_claim(inp)

    @start_claim.validator
    def _validate_start(self, inp: StartInput) -> None:
        self._client_updates.validate_start(inp)

    @workflow.update(name=UPDATE_OUTCOME)
    async def report_outcome(self, inp: OutcomeInput) -> OutcomeResult:
        """Record the client's outcome (the same report again is answered alike)."""
        return await self._client_updates.report_outcome(inp)

    @report_outcome.validator
    def _validate_outcome(self, inp: OutcomeInput) -> None:
        self._client_updates.validate_outcome(inp)
