"""ToolCallWorkflow: classify -> (park for a human) -> execute -> record, exactly once.

Deterministic code only: every decision that needs I/O (registry, policy,
filesystem, database, clock for tokens) happens in an activity and reaches the
workflow through history. The call ends with a `CallOutcome` whatever happens
(deny, expiry, cancellation, a lost worker); it never raises to its caller.

Changing this file: a parked call may sit in history for days, so any change
that alters the sequence of commands must be guarded with
`workflow.patched("<id>")` (see docs/DURABLE.md) and the replay tests in
tests/histories/ must keep passing.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutType,
    WorkflowAlreadyStartedError,
)
from temporalio.exceptions import (
    TimeoutError as TemporalTimeoutError,
)

from parkgate.workflows.client_exec import ClientExecution

with workflow.unsafe.imports_passed_through():
    from parkgate import proof, quorum
    from parkgate.call_rows import opening_of
    from parkgate.decisions import (
        REJECTED_ERROR_TYPE,
        Rejection,
        RejectReason,
        already_decided,
        invalid_decision,
        invalid_edits,
        no_longer_waiting,
        unproven,
    )
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import (
        CALL_WORKFLOW,
        DECISIONS,
        QUERY_STATUS,
        SIGNAL_DECIDE,
        SLACK_OUTCOME_WORKFLOW,
        UPDATE_DECIDE,
        WORKER_LOST_TEXT,
        ApprovalCreated,
        ApprovalRequest,
        CallInput,
        CallOutcome,
        CallStatusView,
        ClassifyInput,
        DecideInput,
        DecideResult,
        DecisionRecord,
        ExecPlan,
        ExecuteInput,
        ExecuteOutput,
        NotifyInput,
        RecordInput,
        RecordOutput,
        RevalidateInput,
        RevalidateOutput,
        SlackMessageRef,
        SlackOutcomeInput,
        StatusRequest,
    )
    from parkgate.events import EventType, ToolEvent
    from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock
    from parkgate.records import (
        ApprovalRecord,
        CallEnd,
        CallFacts,
        CallOpening,
        CallRef,
        CallStatus,
        status_for,
    )
    from parkgate.remember_spec import remember_for
    from parkgate.schema import validate_input
    from parkgate.verdicts import ApprovalInfo, Deny, Execute, PreparedCall
    from parkgate.worker_groups import group_queue

#: Local activities (classify, record, revalidate) are fast and idempotent.
_LOCAL_TIMEOUT = timedelta(seconds=30)
#: classify and revalidate are pure: a few attempts, then the call ends with an error.
_LOCAL_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
#: Store writes retry until the store is back (a history outage delays, never fails, a call).
_RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)
_STORE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30))
#: Regular activities that touch the store only: retried until they land.
_STORE_TIMEOUT = timedelta(seconds=10)
_NOTIFY_SCHEDULE_TO_CLOSE = timedelta(minutes=15)
_NOTIFY_RETRY = RetryPolicy(maximum_attempts=6, maximum_interval=timedelta(minutes=2))
#: classify runs an auto-approved local (NONE/READ) tool in the same local
#: activity when the tool's time limit fits in this one (see ClassifyInput.run_row).
_CLASSIFY_TIMEOUT = timedelta(minutes=3)

T = TypeVar("T")
#: workflow.patched id: from the first write after a call parks, every
#: decision-dependent store write goes through a regular activity (scheduled
#: only when the workflow task that accepted the decision is committed), and
#: tool.confirmation_resolved travels with the write that follows the decision
#: (the execute activity, or the final record of a deny/expiry/cancel).
PATCH_COMMITTED_WRITES = "committed-decision-writes-v1"
#: workflow.patched id: reminder/escalation timers while parked (asked only
#: when the deciding rule has them).
PATCH_REMINDERS = "reminders-v1"
#: workflow.patched id: decide signals must carry a valid proof that parkgate's
#: API sent them (parkgate.proof); asked when the approval request is stored
#: (or at the first decide signal of a call parked before that). The `decide` update's validator
#: always checks the proof: validators do not run on replay.
PATCH_PROVEN_DECISIONS = "proven-decisions-v1"
#: Margin added to the tool timeout: the pipeline enforces the tool timeout and
#: the cancel grace itself; Temporal's start-to-close is the outer backstop.
_EXECUTE_MARGIN = timedelta(seconds=45)


def error_result(tool_use_id: str, error_class: ToolErrorClass, text: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=tool_use_id,
        content=[TextBlock(text=text)],
        is_error=True,
        error_class=error_class,
    )


def lexical_path_errors(prepared: PreparedCall, new_input: dict[str, object]) -> list[str]:
    """Pure (no filesystem) scope check of edited paths, for the update validator.

    The full re-scope (symlinks, realpath) runs in the revalidate activity.
    """
    root = posixpath.normpath(prepared.session.workspace_path)
    errors = []
    for field in prepared.definition.path_fields:
        value = new_input.get(field)
        if not isinstance(value, str):
            continue
        joined = posixpath.normpath(posixpath.join(root, value))
        if joined != root and not joined.startswith(root.rstrip("/") + "/"):
            errors.append(f"{field}: path {value!r} escapes the workspace")
    return errors


@workflow.defn(name=CALL_WORKFLOW)
class ToolCallWorkflow(ClientExecution):
    """One tool call, from classification to its recorded outcome (a client
    tool's call is released to its client instead: `ClientExecution`)."""

    @workflow.init
    def __init__(self, inp: CallInput) -> None:
        self._input = inp
        self._status = CallStatus.QUEUED
        self._prepared: PreparedCall | None = None
        self._info: ApprovalInfo | None = None
        self._approval: ApprovalRecord | None = None
        self._approval_url: str | None = None
        self._decision: DecisionRecord | None = None
        #: Quorum requests: named approvers who have allowed so far (see _tally).
        self._votes: list[str] = []
        #: Set while an accepted update is revalidating edits (old histories).
        self._deciding = False
        #: Serializes applying decisions (an update may await revalidation).
        self._decide_lock = asyncio.Lock()
        #: Accepted decide updates/signals not finished yet: expiry waits for them.
        self._pending_decisions = 0
        #: PATCH_COMMITTED_WRITES, once asked (None before the call parks).
        self._committed_writes: bool | None = None
        #: The resolution not yet written (patched path): goes with the next write.
        self._unwritten_resolution: RecordInput | None = None
        self._outcome: CallOutcome | None = None
        self._background: list[asyncio.Task[None]] = []
        #: Patch "cancel-notify-on-end": a call's end cancels its pending webhook.
        self._cancel_notify_on_end = False
        #: The call's Slack message once posted (ApprovalCreated.slack).
        self._slack_message: SlackMessageRef | None = None
        self._slack = False
        #: A cancellation swallowed while a store write finished (see _record_raw).
        self._cancel_requested = False
        self._verdict: str | None = None
        #: PATCH_PROVEN_DECISIONS, once asked.
        self._proven_signals: bool | None = None
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
            ran = self._status in (CallStatus.RUNNING, CallStatus.CLAIMED)
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

    async def _stop_background(self) -> None:
        """Cancel a webhook still retrying: the call has ended, its notice is moot.

        Cancelling issues a command, so histories written before this change
        (no "cancel-notify-on-end" marker) replay without it.
        """
        pending = [task for task in self._background if not task.done()]
        if pending and (self._cancel_notify_on_end or self._slack):
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def _uses_committed_writes(self) -> bool:
        """PATCH_COMMITTED_WRITES, asked once, at the first write after parking."""
        if self._committed_writes is None:
            self._committed_writes = workflow.patched(PATCH_COMMITTED_WRITES)
        return self._committed_writes

    def _cancelled_while_parked(self) -> None:
        """A cancellation ends the wait: no decision can be accepted any more; a
        decision accepted before it is recorded with the cancellation."""
        if self._decision is not None and self._unwritten_resolution is None:
            self._unwritten_resolution = self._resolution(self._decision.decision)
        self._status = CallStatus.CANCELLED

    async def _run(self, inp: CallInput) -> CallOutcome:
        # An auto-approved read runs inside classify (one local activity, one
        # history write); anything else comes back as a verdict to act on.
        classify_input = ClassifyInput(call=inp.call, session=inp.session, ref=self._ref(),
                                       client_tool=inp.client_tool)
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
                    retry_policy=_LOCAL_RETRY,
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            else:
                classified = await workflow.execute_local_activity(
                    acts.classify,
                    classify_input,
                    start_to_close_timeout=_CLASSIFY_TIMEOUT,
                    retry_policy=_LOCAL_RETRY,
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

    # --------------------------------------------------------------- phases
    async def _deny(self, deny: Deny) -> CallOutcome:
        outcome = CallOutcome(
            result=deny.result,
            status=status_for(deny.error_class),
            error_class=deny.error_class,
        )
        event = self._event(
            deny.event_type,
            error_class=deny.error_class,
            message=deny.result.text,
            side_effects=deny.side_effects,
            data={"rule": deny.rule} if deny.rule else {},
        )
        opening = CallOpening(call=self._input.call, verdict="deny", rule=deny.rule,
                              side_effects=deny.side_effects)
        await self._record_raw(
            [event],
            CallFacts(ref=self._ref(), status=outcome.status, opening=opening,
                      end=_end_of(outcome), finished_at=workflow.now()),
        )
        self._status = outcome.status
        return outcome

    async def _park(self, info: ApprovalInfo, plan: ExecPlan) -> DecisionRecord | None:
        """Create the approval request, notify, then wait for a decision or expiry."""
        now = workflow.now()
        expires_at = now + timedelta(seconds=plan.expiry_seconds) if plan.expiry_seconds else None
        # Decidable from here on (the request id is known; a decision that
        # arrives while the request is being stored is applied after it), but
        # reported as parked only once the request and its link exist, so
        # `parked` always comes with an approval_url a human can use.
        info_ = workflow.info()
        created = await self._shielded(workflow.execute_activity(
            acts.create_approval,
            ApprovalRequest(
                info=info,
                session=self._input.session,
                # As classified: the parked row shows the input that would run.
                call=self._prepared.call if self._prepared else self._input.call,
                requested_at=now,
                expires_at=expires_at,
                workflow_id=info_.workflow_id,
                run_id=info_.run_id,
                ref=self._ref(),
            ),
            start_to_close_timeout=_STORE_TIMEOUT,
            retry_policy=_STORE_RETRY,
        ))
        self._approval = created.approval
        self._approval_url = created.approval_url
        self._status = CallStatus.PARKED
        # Asked right after a regular activity's result (never after a local
        # one: docs/DURABLE.md), so a replay sees the marker in the same task.
        self._proofs_on_signals()
        # A cancel that arrived while the request was stored ends the call now
        # (through run()'s cancellation path, which records `cancelled`).
        self._raise_if_cancelled()
        if created.notify:
            # Decided here, right after a (non-local) activity result, where replay
            # sees the same marker (docs/DURABLE.md); only calls that notify pay it.
            self._cancel_notify_on_end = workflow.patched("cancel-notify-on-end")
            self._background.append(asyncio.create_task(self._notify(created)))
            # Only rules with reminder/escalation timers ask (older histories never do).
            timed = info.remind_after_seconds or info.escalate_after_seconds
            if timed and workflow.patched(PATCH_REMINDERS):
                self._background.append(asyncio.create_task(self._remind(created, now)))
        if created.slack:
            # Only histories whose create_approval said `slack` reach this (the
            # field did not exist before), so older histories replay unchanged.
            self._slack = True
            self._background.append(asyncio.create_task(self._slack_post(created)))
        # The expiry is a point in time: time spent storing the request counts.
        timeout = max(expires_at - workflow.now(), timedelta(seconds=1)) if expires_at else None
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None,
                timeout=timeout,
                timeout_summary="approval expiry",
            )
        except TimeoutError:
            # An update accepted before the expiry fired is still applied
            # (e.g. revalidating edits): it wins over the expiry, or fails alone.
            await workflow.wait_condition(
                lambda: self._decision is not None or self._pending_decisions == 0
            )
            if self._decision is None:
                self._status = CallStatus.EXPIRED  # rejects every later decision
                if self._uses_committed_writes():
                    self._unwritten_resolution = self._resolution(
                        "expired", reason="no decision before expiry"
                    )
                else:
                    await self._resolved("expired", reason="no decision before expiry")
                return None
        decision = self._decision
        assert decision is not None
        if self._uses_committed_writes():
            # Written by the next committed write (execute, or the deny record),
            # never from this workflow task, which Temporal may still discard.
            self._unwritten_resolution = self._resolution(decision.decision)
            if decision.decision == "deny":
                self._status = CallStatus.DENIED
        else:
            await self._resolved(decision.decision)
        return decision

    async def _remind(self, created: ApprovalCreated, parked_at: datetime) -> None:
        """Durable timers while parked: notify again after remind_after_seconds,
        the escalation people after escalate_after_seconds; nothing once the
        call is no longer waiting."""
        info = self._info
        assert info is not None
        steps = sorted((after, kind) for after, kind in (
            (info.remind_after_seconds, "reminder"),
            (info.escalate_after_seconds, "escalation"),
        ) if after)
        for after, kind in steps:
            left = parked_at + timedelta(seconds=after) - workflow.now()
            if left > timedelta(0):
                try:
                    await workflow.wait_condition(self._not_waiting, timeout=left,
                                                  timeout_summary=kind)
                except TimeoutError:
                    pass
            if self._not_waiting():
                return
            await self._notify(created, kind=kind)

    def _not_waiting(self) -> bool:
        return self._decision is not None or self._status != CallStatus.PARKED

    async def _notify(self, created: ApprovalCreated, kind: str = "request") -> None:
        """Run the webhook activity; a failure never blocks or fails the call."""
        info = self._info
        assert info is not None
        notice = NotifyInput(
            info=info,
            session=self._input.session,
            approval_url=created.approval_url,
            requested_at=created.approval.requested_at,
            expires_at=created.approval.expires_at,
            kind=kind,  # type: ignore[arg-type]
        )
        try:
            await workflow.execute_activity(
                acts.notify,
                notice,
                schedule_to_close_timeout=_NOTIFY_SCHEDULE_TO_CLOSE,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_NOTIFY_RETRY,
            )
        except (ActivityError, asyncio.CancelledError) as exc:
            workflow.logger.warning("notify failed for %s: %s", info.request_id, exc)

    async def _slack_post(self, created: ApprovalCreated) -> None:
        """Post the interactive Slack message; a failure never blocks the call."""
        info = self._info
        assert info is not None
        notice = NotifyInput(info=info, session=self._input.session,
                             requested_at=created.approval.requested_at,
                             expires_at=created.approval.expires_at)
        try:
            self._slack_message = await workflow.execute_activity(
                acts.slack_post,
                notice,
                schedule_to_close_timeout=_NOTIFY_SCHEDULE_TO_CLOSE,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_NOTIFY_RETRY,
            )
        except (ActivityError, asyncio.CancelledError) as exc:
            workflow.logger.warning("slack post failed for %s: %s", info.request_id, exc)

    async def _slack_outcome(self, outcome: CallOutcome) -> None:
        """Start the child that shows the outcome on the Slack message (it
        outlives this call, so a slow Slack never holds the result)."""
        if self._slack_message is None or self._info is None:
            return
        try:
            await workflow.start_child_workflow(
                SLACK_OUTCOME_WORKFLOW,
                SlackOutcomeInput(message=self._slack_message, info=self._info,
                                  session_id=self._input.session.session_id,
                                  status=outcome.status.value, decision=self._decision),
                id=f"{workflow.info().workflow_id}/slack-outcome",
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError as exc:  # never fails the call
            workflow.logger.warning("slack outcome not started: %s", exc)

    async def _resolved(self, decision: str, *, reason: str | None = None) -> None:
        """Record tool.confirmation_resolved, the call row and the approval row
        (histories from before PATCH_COMMITTED_WRITES: a local activity)."""
        res = self._resolution(decision, reason=reason, light=False)
        await self._record_raw(res.events, res.facts, res.approval)

    def _resolution(
        self, decision: str, *, reason: str | None = None, light: bool = True
    ) -> RecordInput:
        """tool.confirmation_resolved, the call row and the approval row as decided.

        `light`: the approval carries its decision only, not the request's `info`
        (diff, summary): the resolution travels in history as an activity input.
        """
        rec = self._decision
        if rec is None:
            self._status = CallStatus.EXPIRED
        data: dict[str, Any] = {
            "decision": decision,
            "decided_by": rec.decided_by if rec else None,
            "via": rec.via if rec else None,
            "reason": rec.reason if rec else reason,
            **self._principal_fields(rec),
        }
        approval = self._approval
        if approval is not None:
            approval = approval.model_copy(
                update={**data, "decided_at": rec.decided_at if rec else workflow.now()}
            )
            self._approval = approval
        status = {
            "deny": CallStatus.DENIED,
            "expired": CallStatus.EXPIRED,
        }.get(decision, CallStatus.RUNNING)
        event = self._event(
            "tool.confirmation_resolved",
            request_id=self._info.request_id if self._info else None,
            data={k: v for k, v in data.items() if v is not None},
        )
        if light and approval is not None:
            approval = approval.model_copy(update={"info": {}})
        edited = rec is not None and decision == "allow_with_edits"
        remember = rec.remember if rec is not None and decision != "deny" else None
        prepared = self._prepared
        return RecordInput(
            approval_decision_only=light,
            events=[event],
            # The decision's columns come from `approval`; an edit changes the input.
            facts=CallFacts(
                ref=self._ref(),
                status=status,
                request_id=self._info.request_id if self._info else None,
                input=prepared.call.input if prepared and (edited or remember) else None,
                input_hash=rec.approved_hash if edited and rec else None,
            ),
            approval=approval,
            remember=remember,
        )

    # ------------------------------------------------------- decide handlers
    def _proofs_on_signals(self) -> bool:
        """PATCH_PROVEN_DECISIONS, asked once: decide signals must be proven."""
        if self._proven_signals is None:
            self._proven_signals = workflow.patched(PATCH_PROVEN_DECISIONS)
        return self._proven_signals

    def _proof_problem(self, inp: DecideInput) -> Rejection | None:
        """Why this decision is not proven to come from parkgate's API; pure
        (the worker's installed proof keys, parkgate.proof)."""
        text = proof.problem(inp, proof.KIND_DECIDE, workflow.info().workflow_id)
        return unproven(text) if text is not None else None

    def _decide_problem(self, inp: DecideInput) -> Rejection | None:
        """Why this decision cannot be applied (None when it can); pure."""
        info = self._info
        if info is None or inp.request_id != info.request_id:
            return Rejection(RejectReason.UNKNOWN_REQUEST,
                             f"unknown request id {inp.request_id!r} for this call")
        if self._decision is not None:
            return already_decided(self._decision.decision, self._decision.decided_by)
        storing = self._status == CallStatus.QUEUED and self._approval is None
        if self._status != CallStatus.PARKED and not storing:
            return no_longer_waiting(self._status.value)
        if inp.decision not in DECISIONS:
            return invalid_decision(inp.decision)
        if inp.decision == "allow_with_edits":
            prepared = self._prepared
            assert prepared is not None
            if inp.edited_input is None:
                return Rejection(
                    RejectReason.EDITS_MISSING,
                    "allow_with_edits needs edited_input (the complete replacement input)",
                )
            errors = validate_input(prepared.definition.input_schema, inp.edited_input)
            errors += lexical_path_errors(prepared, inp.edited_input)
            if errors:
                return invalid_edits("; ".join(errors))
        elif inp.edited_input is not None:
            return Rejection(RejectReason.EDITS_NOT_ALLOWED,
                             "edited_input is only allowed with allow_with_edits")
        return self._vote_problem(inp)

    @workflow.update(name=UPDATE_DECIDE)
    async def decide(self, inp: DecideInput) -> DecideResult:
        """Apply a decision; the first one wins and every later caller learns it."""
        return await self._decide_accepted(inp)

    @decide.validator
    def _validate_decide(self, inp: DecideInput) -> None:
        # The proof first: an unproven caller learns nothing of the call.
        unproven_ = self._proof_problem(inp)
        if unproven_ is not None:
            raise ApplicationError(
                unproven_.message, None, unproven_.reason.value,
                type=REJECTED_ERROR_TYPE, non_retryable=True,
            )
        problem = self._decide_problem(inp)
        if problem is not None:
            # The standing winner travels with the rejection: the loser learns
            # it without a status query (which may not be answered in time).
            # details: (winner, reason); the reason is what interfaces map.
            won = self._decision.model_dump(mode="json") if self._decision else None
            raise ApplicationError(
                problem.message, won, problem.reason.value,
                type=REJECTED_ERROR_TYPE, non_retryable=True,
            )

    @workflow.signal(name=SIGNAL_DECIDE)
    async def decide_signal(self, inp: DecideInput) -> None:
        """Fire-and-forget decision; invalid or unproven ones are logged and ignored.

        Signal handlers run again on replay: the proof check answers the same
        as long as the worker keeps the key that proved it (old payload keys
        stay configured until no history needs them, as for decryption).
        """
        if self._proofs_on_signals():
            unproven_ = self._proof_problem(inp)
            if unproven_ is not None:
                workflow.logger.warning("decide signal ignored: %s", unproven_.message)
                return
        problem = self._decide_problem(inp)
        if problem is not None:
            workflow.logger.warning("decide signal ignored: %s", problem.message)
            return
        await self._decide_accepted(inp)

    async def _decide_accepted(self, inp: DecideInput) -> DecideResult:
        """An accepted decide (update or signal): counted while in flight, so an
        expiry firing meanwhile waits for it instead of winning against it."""
        self._pending_decisions += 1
        try:
            if workflow.patched(PATCH_COMMITTED_WRITES):
                async with self._decide_lock:
                    return await self._apply_decision_locked(inp)
            return await self._apply_decision(inp)
        finally:
            self._pending_decisions -= 1

    async def _apply_decision_locked(self, inp: DecideInput) -> DecideResult:
        """Apply one decision while holding the decide lock.

        State is re-checked on entry (a rival may have won while we waited for
        the lock) and again after revalidation (the only await: an expiry or a
        cancellation may have ended the wait meanwhile).
        """
        problem = self._decide_problem(inp)
        if problem is not None:
            return self._refused(problem)
        prepared = self._prepared
        assert prepared is not None
        if inp.decision == "allow_with_edits":
            checked = await self._revalidate(prepared, inp)
            problem = self._decide_problem(inp)
            if problem is not None:
                return self._refused(problem)
            if checked.prepared is None:
                return self._refused(invalid_edits(str(checked.error)), winner=False)
            prepared = checked.prepared
            self._prepared = prepared
        self._decision = self._tally(self._decision_record(inp, prepared), inp)
        if self._decision is None:
            return self._counted()  # a quorum vote that does not decide yet
        return DecideResult(accepted=True, winner=self._decision, message="decision applied")

    async def _revalidate(self, prepared: PreparedCall, inp: DecideInput) -> RevalidateOutput:
        """Full re-scope of edited input (pure: no store writes, safe to discard)."""
        assert inp.edited_input is not None
        checked = RevalidateInput(prepared=prepared, new_input=inp.edited_input)
        queue = self._group_queue()
        if queue is not None:
            # Re-scoping (realpath) needs the workspace: on the group's hosts.
            return await workflow.execute_activity(
                acts.revalidate,
                checked,
                task_queue=queue,
                start_to_close_timeout=_LOCAL_TIMEOUT,
                retry_policy=_LOCAL_RETRY,
            )
        return await workflow.execute_local_activity(
            acts.revalidate,
            checked,
            start_to_close_timeout=_LOCAL_TIMEOUT,
            retry_policy=_LOCAL_RETRY,
        )

    def _decision_record(self, inp: DecideInput, prepared: PreparedCall) -> DecisionRecord:
        """The winning decision as recorded."""
        info = self._info
        return inp.record(
            decided_at=workflow.now(),
            approved_hash=prepared.input_hash if inp.decision != "deny" else None,
            # Data only (no command): written as a rule with the committed decision.
            remember=(
                remember_for(inp.remember, inp.approver, info)
                if inp.decision != "deny" else None
            ),
        )

    async def _apply_decision(self, inp: DecideInput) -> DecideResult:
        """Histories from before PATCH_COMMITTED_WRITES (kept as they ran)."""
        # A rival accepted just before us may still be revalidating its edits.
        await workflow.wait_condition(lambda: not self._deciding)
        problem = self._decide_problem(inp)
        if problem is not None:
            return self._refused(problem)
        prepared = self._prepared
        assert prepared is not None
        self._deciding = True
        try:
            if inp.decision == "allow_with_edits":
                checked = await self._revalidate(prepared, inp)
                if checked.prepared is None:
                    return self._refused(invalid_edits(str(checked.error)), winner=False)
                prepared = checked.prepared
                self._prepared = prepared
            self._decision = self._tally(self._decision_record(inp, prepared), inp)
            if self._decision is None:
                return self._counted()
            return DecideResult(accepted=True, winner=self._decision, message="decision applied")
        finally:
            self._deciding = False

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

    # ------------------------------------------------ named approvers, quorum
    def _refused(self, problem: Rejection, *, winner: bool = True) -> DecideResult:
        """A decision refused inside the handler (after the validator let it in)."""
        return DecideResult.refused(problem, self._decision if winner else None)

    def _vote_problem(self, inp: DecideInput) -> Rejection | None:
        """Why this vote cannot count on a request with named approvers; pure."""
        info = self._info
        if info is None:
            return None
        return quorum.vote_problem(
            info.approvers, info.quorum, self._votes, inp.approver, inp.decision
        )

    def _tally(self, record: DecisionRecord, inp: DecideInput) -> DecisionRecord | None:
        """Count a vote: the decision when it decides the request, else None.

        Without named approvers the first decision decides (as always); with
        them, the quorum's last allow or any deny decides. Votes arrive as
        updates or signals, so a replay recounts them identically.
        """
        info = self._info
        assert info is not None
        self._votes = quorum.count(self._votes, inp.approver, inp.decision)
        if not quorum.decides(info.approvers, info.quorum, self._votes, inp.decision):
            return None
        if info.approvers:
            return record.model_copy(update={"votes": list(self._votes)})
        return record

    def _counted(self) -> DecideResult:
        info = self._info
        assert info is not None
        return DecideResult(
            accepted=True,
            message=f"approval {len(self._votes)} of {info.quorum} recorded; "
            "the call waits for the others",
            votes=list(self._votes),
            quorum=info.quorum,
        )

    def _principal_fields(self, rec: DecisionRecord | None) -> dict[str, Any]:
        """Who decided, beside `decided_by`: only the fields that are set (so a
        call decided without them records exactly what it did before)."""
        if rec is None:
            return {"votes": list(self._votes)} if self._votes else {}
        fields = rec.approval_fields()  # as the approval row holds them
        who = ("principal_id", "claimed_name", "self_approved", "identity", "votes")
        return {k: fields[k] for k in who if fields[k] is not None}

    async def _execute(
        self,
        prepared: PreparedCall,
        approved_hash: str,
        plan: ExecPlan,
    ) -> CallOutcome:
        """Run the tool: local activity for NONE/READ, at-most-once activity otherwise."""
        self._status = CallStatus.RUNNING
        # A decided call runs as a regular activity: it is scheduled only when
        # the workflow task that accepted the decision commits, and it writes
        # tool.confirmation_resolved before the tool starts (no extra step).
        decided = self._committed_writes is True and self._info is not None
        inp = ExecuteInput(
            prepared=prepared,
            approved_hash=approved_hash,
            workflow_id=workflow.info().workflow_id,
            ref=self._ref(),
            request_id=self._info.request_id if self._info else None,
            resolved=self._unwritten_resolution if decided else None,
        )
        start_to_close = timedelta(seconds=plan.start_to_close_seconds) + _EXECUTE_MARGIN
        queue = self._group_queue()
        try:
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
        except ActivityError as exc:
            # The resolution may not be stored: _finish writes it (idempotently).
            # The lost activity may have finished and recorded its outcome before
            # it died: that record stands (never both tool.completed and failed).
            return await self._finish(
                self._activity_failure(exc), event="tool.failed", unless_finished=True
            )
        if out.resolved_recorded:
            self._unwritten_resolution = None
        return await self._conclude(out)

    async def _conclude(self, out: ExecuteOutput) -> CallOutcome:
        """The outcome of a run; recorded here only if the activity could not."""
        outcome = CallOutcome(
            result=out.result,
            status=status_for(out.error_class),
            error_class=out.error_class,
            request_id=self._info.request_id if self._info else None,
            decision=self._decision,
            duration_ms=out.duration_ms,
        )
        if out.recorded:
            # The activity stored the final row with the final event.
            self._status = outcome.status
            self._outcome = outcome
            return outcome
        # The activity recorded tool.called/completed/failed and the full
        # output, or they travel back in `out` (the store was down); the
        # workflow records them and the final row.
        return await self._finish(
            outcome,
            event=None,
            started_at=out.started_at,
            carried=out.pending_events,
            full_output=out.full_output,
        )

    def _activity_failure(self, exc: ActivityError) -> CallOutcome:
        cause = exc.cause
        if isinstance(cause, CancelledError):
            return self._error(ToolErrorClass.CANCELLED, "The call was cancelled while running.")
        if isinstance(cause, TemporalTimeoutError) and cause.type == TimeoutType.HEARTBEAT:
            return self._error(ToolErrorClass.EXECUTION_ERROR, WORKER_LOST_TEXT)
        if isinstance(cause, TemporalTimeoutError):
            return self._error(
                ToolErrorClass.EXECUTION_ERROR,
                f"{WORKER_LOST_TEXT} (execution exceeded its time limit: {cause.message})",
            )
        detail = cause.message if isinstance(cause, ApplicationError) else str(cause)
        return self._error(
            ToolErrorClass.EXECUTION_ERROR,
            f"execution failed in the worker; outcome unknown ({detail})",
        )

    # -------------------------------------------------------------- helpers
    def _group_queue(self) -> str | None:
        """The task queue of the session's worker group; None without a group.

        Derived from the workflow's own queue (the main one), so a deployment
        and its tests agree on it without the workflow reading settings. No
        schedule-to-start or schedule-to-close timeout is ever set on these
        activities: with no live worker in the group a call waits, it never
        fails early and never runs on another group's worker.
        """
        group = self._input.session.worker_group
        return group_queue(workflow.info().task_queue, group) if group else None

    def _error(self, error_class: ToolErrorClass, text: str) -> CallOutcome:
        return CallOutcome(
            result=error_result(self._input.call.id, error_class, text),
            status=status_for(error_class),
            error_class=error_class,
            request_id=self._info.request_id if self._info else None,
            decision=self._decision,
        )

    def _event(self, type_: EventType, **kw: object) -> ToolEvent:
        call, session = self._input.call, self._input.session
        prepared = self._prepared
        kw.setdefault(
            "side_effects", prepared.definition.side_effects if prepared else None
        )
        return ToolEvent.model_validate(
            {
                "type": type_,
                "session_id": session.session_id,
                "turn_id": session.turn_id,
                "tool_use_id": call.id,
                "tool_name": call.name,
                "at": workflow.now(),
                **kw,
            }
        )

    def _ref(self) -> CallRef:
        """Which call (and run) a store write is about: ids, no row."""
        call, session, info = self._input.call, self._input.session, workflow.info()
        return CallRef(
            session_id=session.session_id,
            tool_use_id=call.id,
            turn_id=session.turn_id,
            tool_name=call.name,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            created_at=info.start_time,
        )

    def _opening(self) -> CallOpening | None:
        """What classification said of the call, for a write the store may be the
        first to see (the call never parked: its row may not exist yet)."""
        if self._approval is not None:
            return None  # stored with the approval request
        if self._prepared is not None:
            return opening_of(self._prepared, self._verdict or "execute")
        return CallOpening(call=self._input.call, verdict=self._verdict)

    async def _record_raw(
        self,
        events: list[ToolEvent],
        facts: CallFacts | None,
        approval: ApprovalRecord | None = None,
        *,
        unless_finished: bool = False,
        approval_decision_only: bool = False,
    ) -> RecordOutput | None:
        """Write to the store; a cancellation arriving meanwhile cannot abort the write
        (it would leave the row behind the outcome) and is acted on afterwards.

        Once a call has parked (PATCH_COMMITTED_WRITES) the write is a regular
        activity: a local one runs inside the workflow task, before Temporal has
        committed it, and a discarded task (a speculative update task, a lost
        worker) would leave a write the committed run may contradict.
        """
        record = RecordInput(
            events=events,
            facts=facts,
            approval=approval,
            unless_finished=unless_finished,
            approval_decision_only=approval_decision_only,
        )
        if self._committed_writes:
            return await self._shielded(
                workflow.execute_activity(
                    acts.record_committed,
                    record,
                    start_to_close_timeout=_STORE_TIMEOUT,
                    retry_policy=_RECORD_RETRY,
                )
            )
        return await self._shielded(
            workflow.execute_local_activity(
                acts.record,
                record,
                start_to_close_timeout=_LOCAL_TIMEOUT,
                retry_policy=_RECORD_RETRY,
            )
        )

    async def _shielded(self, store_write: Awaitable[T]) -> T:
        """Await a store write that a cancellation must not cut short.

        The cancellation is remembered and acted on by `_raise_if_cancelled`.
        """
        task = asyncio.ensure_future(store_write)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    raise
                self._cancel_requested = True

    def _raise_if_cancelled(self) -> None:
        """Act on a cancellation that arrived during a store write."""
        if self._cancel_requested:
            raise asyncio.CancelledError("cancelled while recording")

    async def _finish(
        self,
        outcome: CallOutcome,
        *,
        event: EventType | None,
        started_at: object = None,
        carried: list[ToolEvent] | None = None,
        full_output: dict[str, Any] | None = None,
        unless_finished: bool = False,
    ) -> CallOutcome:
        """Record the final state of the call row (and the failure event, if any).

        `carried` are events the execute activity could not store (store outage).
        """
        events = list(carried or [])
        if event is not None and outcome.error_class is not None:
            events.append(
                self._event(event, error_class=outcome.error_class, message=outcome.result.text)
            )
        finished_at = workflow.now()
        if isinstance(started_at, datetime) and outcome.duration_ms:
            # A local activity runs inside one workflow task, whose clock does
            # not move: never record a finish before the run's own start.
            finished_at = max(finished_at, started_at + timedelta(milliseconds=outcome.duration_ms))
        facts = CallFacts(
            ref=self._ref(),
            status=outcome.status,
            opening=self._opening(),
            request_id=outcome.request_id,
            end=_end_of(outcome),
            started_at=started_at if isinstance(started_at, datetime) else None,
            finished_at=finished_at,
            full_output=full_output,
        )
        self._status = outcome.status
        self._outcome = outcome
        approval: ApprovalRecord | None = None
        decision_only = False
        resolution = self._unwritten_resolution
        if resolution is not None:
            # The decision (deny, expiry, or one a cancellation overtook) is
            # stored in the same committed write as the outcome it led to.
            events = [*resolution.events, *events]
            approval = resolution.approval
            decision_only = resolution.approval_decision_only
            if resolution.facts is not None:
                # The edit the decision made stands under the outcome.
                facts = facts.model_copy(update={
                    "input": resolution.facts.input,
                    "input_hash": resolution.facts.input_hash,
                })
        recorded = await self._record_raw(
            events,
            facts,
            approval,
            unless_finished=unless_finished,
            approval_decision_only=decision_only,
        )
        self._unwritten_resolution = None
        done = recorded.finished if recorded is not None else None
        if done is not None:
            outcome = outcome.model_copy(
                update={
                    "result": done.result,
                    "status": done.status,
                    "error_class": done.error_class,
                    "duration_ms": done.duration_ms or 0.0,
                }
            )
            self._status = outcome.status
            self._outcome = outcome
        return outcome


def _end_of(outcome: CallOutcome) -> CallEnd:
    """The part of an outcome the call row keeps."""
    return CallEnd(result=outcome.result, status=outcome.status,
                   error_class=outcome.error_class, duration_ms=outcome.duration_ms)
