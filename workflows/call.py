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
)
from temporalio.exceptions import (
    TimeoutError as TemporalTimeoutError,
)

with workflow.unsafe.imports_passed_through():
    from dispatcher.durable_models import (
        ACT_CLASSIFY,
        ACT_CREATE_APPROVAL,
        ACT_EXECUTE,
        ACT_EXECUTE_LOCAL,
        ACT_NOTIFY,
        ACT_RECORD,
        ACT_REVALIDATE,
        CALL_WORKFLOW,
        DECISIONS,
        QUERY_STATUS,
        SIGNAL_DECIDE,
        UPDATE_DECIDE,
        WORKER_LOST_TEXT,
        ApprovalCreated,
        ApprovalRequest,
        CallInput,
        CallOutcome,
        CallStatusView,
        ClassifyInput,
        ClassifyOutput,
        DecideInput,
        DecideResult,
        DecisionRecord,
        ExecPlan,
        ExecuteInput,
        ExecuteOutput,
        NotifyInput,
        NotifyOutput,
        RecordInput,
        RecordOutput,
        RevalidateInput,
        RevalidateOutput,
        StatusRequest,
        prepared_fields,
        with_prepared,
    )
    from dispatcher.events import EventType, ToolEvent
    from dispatcher.models import TextBlock, ToolErrorClass, ToolResultBlock
    from dispatcher.schema import validate_input
    from dispatcher.store.records import ApprovalRecord, CallStatus, CallUpdate, status_for
    from dispatcher.verdicts import ApprovalInfo, Deny, Execute, PreparedCall

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
class ToolCallWorkflow:
    """One tool call, from classification to its recorded outcome."""

    @workflow.init
    def __init__(self, inp: CallInput) -> None:
        self._input = inp
        self._status = CallStatus.QUEUED
        self._prepared: PreparedCall | None = None
        self._info: ApprovalInfo | None = None
        self._approval: ApprovalRecord | None = None
        self._approval_url: str | None = None
        self._decision: DecisionRecord | None = None
        #: Set while an accepted update is revalidating edits (blocks rivals).
        self._deciding = False
        self._outcome: CallOutcome | None = None
        self._background: list[asyncio.Task[None]] = []
        #: A cancellation swallowed while a store write finished (see _record_raw).
        self._cancel_requested = False
        self._verdict: str | None = None

    # ------------------------------------------------------------------ run
    @workflow.run
    async def run(self, inp: CallInput) -> CallOutcome:
        try:
            outcome = await self._run(inp)
        except asyncio.CancelledError:
            # Cancelled before execution started (classifying or parked).
            outcome = await self._finish(
                self._error(ToolErrorClass.CANCELLED, "The call was cancelled before it ran."),
                event="tool.failed",
            )
        self._outcome = outcome
        return outcome

    async def _run(self, inp: CallInput) -> CallOutcome:
        # An auto-approved read runs inside classify (one local activity, one
        # history write); anything else comes back as a verdict to act on.
        queued = self._update(status=CallStatus.QUEUED, verdict="execute")
        try:
            classified = await workflow.execute_local_activity(
                ACT_CLASSIFY,
                ClassifyInput(call=inp.call, session=inp.session, run_row=queued),
                result_type=ClassifyOutput,
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
            if classified.executed is not None:
                self._status = CallStatus.RUNNING
                return await self._conclude(classified.executed)
            # The queued row is written by the execute activity with tool.called.
            initial = with_prepared(queued, verdict.prepared)
            return await self._execute(
                verdict.prepared, verdict.prepared.input_hash, classified.plan, initial=initial
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
        await self._record_raw(
            [event],
            self._update(
                status=outcome.status,
                verdict="deny",
                rule=deny.rule,
                side_effects=deny.side_effects,
                error_class=deny.error_class,
                result=deny.result,
                finished_at=workflow.now(),
            ),
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
            ACT_CREATE_APPROVAL,
            ApprovalRequest(
                info=info,
                session=self._input.session,
                call=self._input.call,
                requested_at=now,
                expires_at=expires_at,
                workflow_id=info_.workflow_id,
                run_id=info_.run_id,
                update=self._update(
                    status=CallStatus.PARKED, verdict="needs_approval",
                    request_id=info.request_id, rule=info.rule,
                ),
            ),
            result_type=ApprovalCreated,
            start_to_close_timeout=_STORE_TIMEOUT,
            retry_policy=_STORE_RETRY,
        ))
        self._approval = created.approval
        self._approval_url = created.approval_url
        self._status = CallStatus.PARKED
        # A cancel that arrived while the request was stored ends the call now
        # (through run()'s cancellation path, which records `cancelled`).
        self._raise_if_cancelled()
        if created.notify:
            self._background.append(asyncio.create_task(self._notify(created)))
        # The expiry is a point in time: time spent storing the request counts.
        timeout = max(expires_at - workflow.now(), timedelta(seconds=1)) if expires_at else None
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None,
                timeout=timeout,
                timeout_summary="approval expiry",
            )
        except TimeoutError:
            if self._decision is None:
                await self._resolved("expired", reason="no decision before expiry")
                return None
        decision = self._decision
        assert decision is not None
        await self._resolved(decision.decision)
        return decision

    async def _notify(self, created: ApprovalCreated) -> None:
        """Run the webhook activity; a failure never blocks or fails the call."""
        info = self._info
        assert info is not None
        notice = NotifyInput(
            info=info,
            session=self._input.session,
            approval_url=created.approval_url,
            requested_at=created.approval.requested_at,
            expires_at=created.approval.expires_at,
        )
        try:
            await workflow.execute_activity(
                ACT_NOTIFY,
                notice,
                result_type=NotifyOutput,
                schedule_to_close_timeout=_NOTIFY_SCHEDULE_TO_CLOSE,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_NOTIFY_RETRY,
            )
        except (ActivityError, asyncio.CancelledError) as exc:
            workflow.logger.warning("notify failed for %s: %s", info.request_id, exc)

    async def _resolved(self, decision: str, *, reason: str | None = None) -> None:
        """Record tool.confirmation_resolved, the call row and the approval row."""
        rec = self._decision
        if rec is None:
            self._status = CallStatus.EXPIRED
        data = {
            "decision": decision,
            "decided_by": rec.decided_by if rec else None,
            "via": rec.via if rec else None,
            "reason": rec.reason if rec else reason,
        }
        approval = self._approval
        if approval is not None:
            approval = approval.model_copy(
                update={
                    "decision": decision,
                    "decided_by": data["decided_by"],
                    "via": data["via"],
                    "reason": data["reason"],
                    "decided_at": rec.decided_at if rec else workflow.now(),
                }
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
        await self._record_raw(
            [event],
            self._update(
                status=status,
                request_id=self._info.request_id if self._info else None,
                decision=decision,
                decided_by=data["decided_by"],
                via=data["via"],
                reason=data["reason"],
                input=self._prepared.call.input if self._prepared else None,
                input_hash=rec.approved_hash if rec else None,
            ),
            approval,
        )

    # ------------------------------------------------------- decide handlers
    def _decide_problem(self, inp: DecideInput) -> str | None:
        """Why this decision cannot be applied (None when it can); pure."""
        info = self._info
        if info is None or inp.request_id != info.request_id:
            return f"unknown request id {inp.request_id!r} for this call"
        if self._decision is not None:
            won = self._decision
            who = f" by {won.decided_by}" if won.decided_by else ""
            return f"already decided: {won.decision}{who}"
        storing = self._status == CallStatus.QUEUED and self._approval is None
        if self._status != CallStatus.PARKED and not storing:
            return f"the call is no longer waiting for approval (status {self._status.value})"
        if inp.decision not in DECISIONS:
            return f"invalid decision {inp.decision!r}; expected one of {', '.join(DECISIONS)}"
        if inp.decision == "allow_with_edits":
            prepared = self._prepared
            assert prepared is not None
            if inp.edited_input is None:
                return "allow_with_edits needs edited_input (the complete replacement input)"
            errors = validate_input(prepared.definition.input_schema, inp.edited_input)
            errors += lexical_path_errors(prepared, inp.edited_input)
            if errors:
                return "edited input is not valid: " + "; ".join(errors)
        elif inp.edited_input is not None:
            return "edited_input is only allowed with allow_with_edits"
        return None

    @workflow.update(name=UPDATE_DECIDE)
    async def decide(self, inp: DecideInput) -> DecideResult:
        """Apply a decision; the first one wins and every later caller learns it."""
        return await self._apply_decision(inp)

    @decide.validator
    def _validate_decide(self, inp: DecideInput) -> None:
        problem = self._decide_problem(inp)
        if problem is not None:
            raise ApplicationError(problem, type="DecisionRejected", non_retryable=True)

    @workflow.signal(name=SIGNAL_DECIDE)
    async def decide_signal(self, inp: DecideInput) -> None:
        """Fire-and-forget decision; invalid ones are logged and ignored."""
        problem = self._decide_problem(inp)
        if problem is not None:
            workflow.logger.warning("decide signal ignored: %s", problem)
            return
        await self._apply_decision(inp)

    async def _apply_decision(self, inp: DecideInput) -> DecideResult:
        # A rival accepted just before us may still be revalidating its edits.
        await workflow.wait_condition(lambda: not self._deciding)
        problem = self._decide_problem(inp)
        if problem is not None:
            return DecideResult(accepted=False, winner=self._decision, message=problem)
        prepared = self._prepared
        assert prepared is not None
        self._deciding = True
        try:
            if inp.decision == "allow_with_edits":
                assert inp.edited_input is not None
                checked = await workflow.execute_local_activity(
                    ACT_REVALIDATE,
                    RevalidateInput(prepared=prepared, new_input=inp.edited_input),
                    result_type=RevalidateOutput,
                    start_to_close_timeout=_LOCAL_TIMEOUT,
                    retry_policy=_LOCAL_RETRY,
                )
                if checked.prepared is None:
                    return DecideResult(
                        accepted=False,
                        message=f"edited input is not valid: {checked.error}",
                    )
                prepared = checked.prepared
                self._prepared = prepared
            self._decision = DecisionRecord(
                request_id=inp.request_id,
                decision=inp.decision,  # type: ignore[arg-type]
                reason=inp.reason,
                decided_by=inp.decided_by,
                via=inp.via,
                decided_at=workflow.now(),
                approved_hash=prepared.input_hash if inp.decision != "deny" else None,
            )
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
        )

    async def _execute(
        self,
        prepared: PreparedCall,
        approved_hash: str,
        plan: ExecPlan,
        *,
        initial: CallUpdate | None = None,
    ) -> CallOutcome:
        """Run the tool: local activity for NONE/READ, at-most-once activity otherwise."""
        self._status = CallStatus.RUNNING
        inp = ExecuteInput(
            prepared=prepared,
            approved_hash=approved_hash,
            workflow_id=workflow.info().workflow_id,
            initial=initial,
            final=self._update(request_id=self._info.request_id if self._info else None),
        )
        start_to_close = timedelta(seconds=plan.start_to_close_seconds) + _EXECUTE_MARGIN
        try:
            if plan.local and not prepared.definition.side_effects.mutates:
                out = await workflow.execute_local_activity(
                    ACT_EXECUTE_LOCAL,
                    inp,
                    result_type=ExecuteOutput,
                    start_to_close_timeout=start_to_close,
                    retry_policy=RetryPolicy(maximum_attempts=2),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            else:
                out = await workflow.execute_activity(
                    ACT_EXECUTE,
                    inp,
                    result_type=ExecuteOutput,
                    start_to_close_timeout=start_to_close,
                    heartbeat_timeout=timedelta(seconds=plan.heartbeat_timeout_seconds),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
        except ActivityError as exc:
            return await self._finish(self._activity_failure(exc), event="tool.failed")
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

    def _update(self, **kw: object) -> CallUpdate:
        call, session, info = self._input.call, self._input.session, workflow.info()
        prepared = self._prepared
        base: dict[str, object] = {
            "session_id": session.session_id,
            "tool_use_id": call.id,
            "turn_id": session.turn_id,
            "tool_name": call.name,
            "input": call.input,
            "verdict": self._verdict,
            "workflow_id": info.workflow_id,
            "run_id": info.run_id,
            "created_at": info.start_time,
        }
        if prepared is not None:
            base.update(prepared_fields(prepared))
        base.update({k: v for k, v in kw.items() if v is not None})
        return CallUpdate.model_validate(base)

    async def _record_raw(
        self,
        events: list[ToolEvent],
        update: CallUpdate | None,
        approval: ApprovalRecord | None = None,
    ) -> None:
        """Write to the store; a cancellation arriving meanwhile cannot abort the write
        (it would leave the row behind the outcome) and is acted on afterwards."""
        await self._shielded(
            workflow.execute_local_activity(
                ACT_RECORD,
                RecordInput(events=events, update=update, approval=approval),
                result_type=RecordOutput,
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
        update = self._update(
            status=outcome.status,
            error_class=outcome.error_class,
            result=outcome.result,
            started_at=started_at,
            finished_at=finished_at,
            duration_ms=outcome.duration_ms or None,
            request_id=outcome.request_id,
            full_output=full_output,
        )
        self._status = outcome.status
        self._outcome = outcome
        await self._record_raw(events, update)
        return outcome
