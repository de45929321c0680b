"""The recording part of ToolCallWorkflow: what a store write says, and the write.

`CallRecording` is built with the call's `CallState` (call_state.py) and is
the one part every other part receives: the call's ids (`ref`), its events
(`event`), its error outcomes (`error`), and every write of the call row and
its events, through `record_raw` (a local activity before the call parks, a
regular one after: PATCH_COMMITTED_WRITES), shielded from cancellation;
`finish` writes the final row. The workflow patch ids every part asks live
here, and so do the questions asked once (`uses_committed_writes`...), whose
answers the state keeps. Deterministic code only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from parkgate.calls.cancellation import Cancellation
    from parkgate.calls.events import EventType, ToolEvent
    from parkgate.calls.records import (
        ApprovalRecord,
        CallEnd,
        CallFacts,
        CallOpening,
        CallRef,
        status_for,
    )
    from parkgate.calls.rows import opening_of
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import CallOutcome, RecordInput, RecordOutput
    from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock
    from parkgate.verdicts import Deny
    from parkgate.workspaces.worker_groups import group_queue

if TYPE_CHECKING:
    from parkgate.workflows.call_state import CallState


#: Local activities (classify, record, revalidate) are fast and idempotent.
LOCAL_TIMEOUT = timedelta(seconds=30)
#: revalidate is pure: a few attempts, then the call ends with an error.
LOCAL_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(milliseconds=200))
#: classify reads the store (remembered rules): no cap, so a store outage delays
#: the call until the store answers (or the call is cancelled). Any other
#: failure is retried until the activity's 5th attempt (`CLASSIFY_ATTEMPTS`),
#: which answers a Deny. A retry policy is no command of its own (a local
#: activity's lives in the worker; a scheduled one's is an attribute replay
#: does not compare), so recorded histories replay unchanged.
CLASSIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5)
)
#: Store writes retry until the store is back (a history outage delays, never fails, a call).
_RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)
STORE_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30))
#: Regular activities that touch the store only: retried until they land.
STORE_TIMEOUT = timedelta(seconds=10)

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
#: API sent them (parkgate.approvals.proof); asked when the approval request is stored
#: (or at the first decide signal of a call parked before that). The `decide` update's validator
#: always checks the proof: validators do not run on replay.
PATCH_PROVEN_DECISIONS = "proven-decisions-v1"
#: workflow.patched id: the `decide` signal is ignored (issue 37). Its proof
#: could only be checked in the signal handler, which replays, so a worker
#: with other keys would replay another path; decisions come as the `decide`
#: update, whose validator checks the proof and never replays. Asked right
#: after the approval request is stored (beside PATCH_PROVEN_DECISIONS), or at
#: a decide signal that comes before.
PATCH_DECIDE_SIGNAL_RETIRED = "decide-signal-retired-v1"


def error_result(tool_use_id: str, error_class: ToolErrorClass, text: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=tool_use_id,
        content=[TextBlock(text=text)],
        is_error=True,
        error_class=error_class,
    )


class CallRecording:
    """The part of ToolCallWorkflow every other part receives: the patch
    questions asked once, the call's ids, events and errors, its store writes."""

    def __init__(self, state: CallState) -> None:
        self.state = state

    def uses_committed_writes(self) -> bool:
        """PATCH_COMMITTED_WRITES, asked once, at the first write after parking."""
        if self.state.committed_writes is None:
            self.state.committed_writes = workflow.patched(PATCH_COMMITTED_WRITES)
        return self.state.committed_writes

    def decide_signals_retired(self) -> bool:
        """PATCH_DECIDE_SIGNAL_RETIRED, asked once: right after the approval
        request is stored, or at a decide signal before that. (Asked at the
        first signal alone, a replayer that decodes a payload the worker
        refused would ask it in another task than the one holding the marker.)"""
        if self.state.retired_signals is None:
            self.state.retired_signals = workflow.patched(PATCH_DECIDE_SIGNAL_RETIRED)
        return self.state.retired_signals

    def proofs_on_signals(self) -> bool:
        """PATCH_PROVEN_DECISIONS, asked once: decide signals must be proven."""
        if self.state.proven_signals is None:
            self.state.proven_signals = workflow.patched(PATCH_PROVEN_DECISIONS)
        return self.state.proven_signals

    async def deny(self, deny: Deny) -> CallOutcome:
        outcome = CallOutcome(
            result=deny.result,
            status=status_for(deny.error_class),
            error_class=deny.error_class,
        )
        event = self.event(
            deny.event_type,
            error_class=deny.error_class,
            message=deny.result.text,
            side_effects=deny.side_effects,
            data={"rule": deny.rule} if deny.rule else {},
        )
        opening = CallOpening(call=self.state.input.call, verdict="deny", rule=deny.rule,
                              side_effects=deny.side_effects)
        await self.record_raw(
            [event],
            CallFacts(ref=self.ref(), status=outcome.status, opening=opening,
                      end=_end_of(outcome), finished_at=workflow.now()),
        )
        self.state.status = outcome.status
        return outcome

    def group_queue(self) -> str | None:
        """The task queue of the session's worker group; None without a group.

        Derived from the workflow's own queue (the main one), so a deployment
        and its tests agree on it without the workflow reading settings. No
        schedule-to-start or schedule-to-close timeout is ever set on these
        activities: with no live worker in the group a call waits, it never
        fails early and never runs on another group's worker.
        """
        group = self.state.input.session.worker_group
        return group_queue(workflow.info().task_queue, group) if group else None

    def error(self, error_class: ToolErrorClass, text: str) -> CallOutcome:
        return CallOutcome(
            result=error_result(self.state.input.call.id, error_class, text),
            status=status_for(error_class),
            error_class=error_class,
            request_id=self.request_id(),
            decision=self.state.decision,
        )

    def request_id(self) -> str | None:
        """The approval request's id, once the call has one (it parked)."""
        info = self.state.info
        return info.request_id if info else None

    def event(self, type_: EventType, **kw: object) -> ToolEvent:
        call, session = self.state.input.call, self.state.input.session
        prepared = self.state.prepared
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

    def ref(self) -> CallRef:
        """Which call (and run) a store write is about: ids, no row."""
        call, session, info = self.state.input.call, self.state.input.session, workflow.info()
        return CallRef(
            session_id=session.session_id,
            tool_use_id=call.id,
            turn_id=session.turn_id,
            tool_name=call.name,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            created_at=info.start_time,
        )

    def opening(self) -> CallOpening | None:
        """What classification said of the call, for a write the store may be the
        first to see (the call never parked: its row may not exist yet)."""
        if self.state.approval is not None:
            return None  # stored with the approval request
        if self.state.prepared is not None:
            return opening_of(self.state.prepared, self.state.verdict or "execute")
        return CallOpening(call=self.state.input.call, verdict=self.state.verdict)

    async def record_raw(
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
        if self.state.committed_writes:
            return await self.shielded(
                workflow.execute_activity(
                    acts.record_committed,
                    record,
                    start_to_close_timeout=STORE_TIMEOUT,
                    retry_policy=_RECORD_RETRY,
                )
            )
        return await self.shielded(
            workflow.execute_local_activity(
                acts.record,
                record,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=_RECORD_RETRY,
            )
        )

    async def shielded(self, store_write: Awaitable[T]) -> T:
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
                self.state.cancel_requested = True

    def cancellation(self) -> Cancellation | None:
        """Who cancelled the call and why, as the cancel request in history
        says (None without a request, or one from before reasons were sent)."""
        return Cancellation.decode(workflow.cancellation_reason())

    def raise_if_cancelled(self) -> None:
        """Act on a cancellation that arrived during a store write."""
        if self.state.cancel_requested:
            raise asyncio.CancelledError("cancelled while recording")

    async def finish(
        self,
        outcome: CallOutcome,
        *,
        event: EventType | None,
        started_at: object = None,
        carried: list[ToolEvent] | None = None,
        full_output: dict[str, Any] | None = None,
        unless_finished: bool = False,
        data: dict[str, Any] | None = None,
    ) -> CallOutcome:
        """Record the final state of the call row (and the failure event, if any).

        `carried` are events the execute activity could not store (store outage);
        `data` is the failure event's details (who cancelled the call, say).
        """
        events = list(carried or [])
        if event is not None and outcome.error_class is not None:
            events.append(self.event(event, error_class=outcome.error_class,
                                     message=outcome.result.text, data=data or {}))
        finished_at = workflow.now()
        if isinstance(started_at, datetime) and outcome.duration_ms:
            # A local activity runs inside one workflow task, whose clock does
            # not move: never record a finish before the run's own start.
            finished_at = max(finished_at, started_at + timedelta(milliseconds=outcome.duration_ms))
        facts = CallFacts(
            ref=self.ref(),
            status=outcome.status,
            opening=self.opening(),
            request_id=outcome.request_id,
            end=_end_of(outcome),
            started_at=started_at if isinstance(started_at, datetime) else None,
            finished_at=finished_at,
            full_output=full_output,
        )
        self.state.status = outcome.status
        self.state.outcome = outcome
        approval: ApprovalRecord | None = None
        decision_only = False
        resolution = self.state.unwritten_resolution
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
        recorded = await self.record_raw(
            events,
            facts,
            approval,
            unless_finished=unless_finished,
            approval_decision_only=decision_only,
        )
        self.state.unwritten_resolution = None
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
            self.state.status = outcome.status
            self.state.outcome = outcome
        return outcome


def _end_of(outcome: CallOutcome) -> CallEnd:
    """The part of an outcome the call row keeps."""
    return CallEnd(result=outcome.result, status=outcome.status,
                   error_class=outcome.error_class, duration_ms=outcome.duration_ms)
