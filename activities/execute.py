"""`parkgate.execute` (at most once, heartbeated) and `parkgate.execute_local` (NONE/READ).

The workflow runs WRITE/EXECUTE/NETWORK tools through `execute` with
maximum_attempts=1 and a heartbeat timeout: if this worker dies, the server
times the activity out and the workflow reports "outcome unknown" instead of
running the tool again. Cancellation (workflow cancel, cancel_session_tools)
arrives here as asyncio cancellation; it is turned into the pipeline's
cancel_event so the tool cleans up (the shell kills its process group) and the
partial output is returned as a normal `cancelled` result. Once the tool has
run, its outcome is stored and returned even if a cancellation arrives then
(heartbeat responses can bring it after the tool's write completed).

A non-atomic composed tool whose sub-call needs a human ends the activity
early with `ExecuteOutput.parked` (activities/subcall_gate.py): the workflow
waits for the decision and schedules the run again, resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from temporalio import activity

from parkgate.activities.budgets import reprice_if_up
from parkgate.activities.deps import Deps
from parkgate.activities.heartbeating import heartbeating
from parkgate.activities.plan import approval_expiry, parks_sub_calls
from parkgate.activities.record import record_row, write_approval
from parkgate.activities.subcall_gate import DurableGate
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallEnd, CallRef, CallStatus, CallUpdate, status_for
from parkgate.calls.rows import ended, merged, opened, opening_of, running
from parkgate.durable.payloads import (
    ACT_EXECUTE,
    ACT_EXECUTE_LOCAL,
    ExecuteInput,
    ExecuteOutput,
    RecordInput,
    SubCallPark,
)
from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock, is_input_hash, utcnow
from parkgate.pipeline.subcall_runner import SubCallParked
from parkgate.verdicts import ToolRun

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Extra wait, beyond the pipeline's own cancel grace, before abandoning a tool.
_ABANDON_MARGIN = 5.0
#: Largest full output carried back through Temporal when the store is down.
_CARRY_OUTPUT_BYTES = 256 * 1024
#: A deferred tool.called is stored on its own once a read runs this long.
CALLED_FLUSH_DELAY = 0.25


async def _despite_cancellation(work: Awaitable[T]) -> T:
    """Await `work` to its end: a cancellation of the awaiting task is absorbed
    (the activity then completes normally, reporting what happened)."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return task.result()
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # a later await must not re-raise it


def hash_mismatch(inp: ExecuteInput) -> bool:
    """True when the input about to run is not exactly what was approved."""
    call = inp.prepared.call
    # Either form: a call approved before RFC 8785 (parkgate.jcs) holds the
    # json.dumps hash, and still runs once approved.
    return not is_input_hash(inp.approved_hash, call.name, call.input) \
        or inp.prepared.input_hash != inp.approved_hash


class Lead:
    """The decision an approved run carries (ExecuteInput.resolved): stored in the
    same transaction as the run's first write (tool.called and the running row,
    before the tool starts), instead of in two writes of its own."""

    def __init__(self, resolved: RecordInput | None) -> None:
        self.resolved = resolved
        #: True once stored (or when there is nothing to store).
        self.recorded = resolved is None

    def take(self) -> RecordInput | None:
        resolved, self.resolved = self.resolved, None
        return resolved


def _records_final(inp: ExecuteInput) -> bool:
    """Whether this run writes the call's final row (the workflow then needs no
    record step): when the workflow named the call."""
    return inp.ref is not None or inp.final is not None


def _with_opening(inp: ExecuteInput, ref: CallRef, row: CallUpdate) -> CallUpdate:
    """`row`, plus what classification decided when this run may be the call's
    first write (an auto-approved call: nothing was stored for it before it
    ran); a decided call's row exists since it parked."""
    if inp.request_id is not None or inp.resolved is not None:
        return row
    status = row.status or CallStatus.RUNNING
    return merged(opened(ref, opening_of(inp.prepared, "execute"), status), row)


class DeferredCalled:
    """tool.called of one run: stored at once, or held to share the final write.

    Held only for short local runs: if the tool is still running after
    CALLED_FLUSH_DELAY (or emits a sub-call), the event and the running row
    are stored on their own so live streams show the call running.
    """

    def __init__(self, owner: ExecuteActivities, pending: list[ToolEvent], *, defer: bool,
                 lead: Lead | None = None):
        self.owner = owner
        self.pending = pending
        self.defer = defer
        self.lead = lead
        self.item: tuple[ToolEvent, CallUpdate] | None = None
        self.timer: asyncio.Task[None] | None = None

    async def hold(self, event: ToolEvent, row: CallUpdate) -> None:
        self.item = (event, row)
        if not self.defer:
            await self.flush()
        else:
            self.timer = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(CALLED_FLUSH_DELAY)
        await self.flush()

    async def flush(self) -> None:
        """Store the held event now (it joins `pending` if the store is down)."""
        item, self.item = self.item, None
        if item is not None:
            await self.owner._emit(item[0], self.pending, item[1], lead=self.lead)

    async def settle(self) -> list[ToolEvent]:
        """The event still to be written with the outcome ([] if already stored)."""
        timer, self.timer = self.timer, None
        if timer is not None and not timer.done():
            if self.item is not None:
                timer.cancel()  # still sleeping: the event goes with the outcome
            with contextlib.suppress(asyncio.CancelledError):
                await timer  # or mid-write: let that write finish
        item, self.item = self.item, None
        return [item[0]] if item is not None else []


class ExecuteActivities:
    """Runs prepared calls through Pipeline.execute and stores their full output."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn(name=ACT_EXECUTE)
    async def execute(self, inp: ExecuteInput) -> ExecuteOutput:
        return await self._run(inp, heartbeat=True)

    @activity.defn(name=ACT_EXECUTE_LOCAL)
    async def execute_local(self, inp: ExecuteInput) -> ExecuteOutput:
        return await self.run_local(inp)

    async def run_local(self, inp: ExecuteInput) -> ExecuteOutput:
        """Run a NONE/READ call without heartbeats (also used by classify)."""
        return await self._run(inp, heartbeat=False)

    # ------------------------------------------------------------------
    async def _run(self, inp: ExecuteInput, *, heartbeat: bool) -> ExecuteOutput:
        """One run, heartbeated from its first store write to its last: a write
        waiting on a busy store must not time the run out ("worker lost")."""
        async with heartbeating(heartbeat):
            return await self._run_beating(inp, heartbeat=heartbeat)

    async def _run_beating(self, inp: ExecuteInput, *, heartbeat: bool) -> ExecuteOutput:
        pending: list[ToolEvent] = []
        # The decision that lets this call run is stored before it runs, with the run's
        # first write; when the store is down it travels back (see ExecuteOutput).
        lead = await self._store_resolved(inp, pending)
        if hash_mismatch(inp):
            out = await self._refuse(inp, pending, lead)
            return out.model_copy(update={"resolved_recorded": lead.recorded})
        held: list[ToolEvent] = []
        parent_id = inp.prepared.call.id
        # A read (local run) that records its own final row stores tool.called
        # with the outcome, in one write, unless it is still running after a
        # moment. At-most-once runs store tool.called before the tool starts.
        called = DeferredCalled(self, pending, defer=_records_final(inp) and not heartbeat,
                                lead=lead)

        async def emit(event: ToolEvent) -> None:
            if event.tool_use_id != parent_id:
                # A composed tool's sub-call: stored as it happens; the store puts it
                # in the parent's chain (parent_tool_use_id). During a store outage
                # it joins `pending` in order and travels back like the rest. A sub-call
                # asking for approval was just stored in its approval record, so the
                # store is back: flush what is pending so humans and streams see it now.
                await called.flush()
                await self._emit(
                    event, pending, retry=event.type == "tool.confirmation_requested", lead=lead
                )
            elif event.type == "tool.called":
                if inp.sub_decided is not None:
                    return  # a resumed run: the call's tool.called is stored already
                await called.hold(event, self._running_row(inp, event))
            else:  # the final event is stored with the full output, in one transaction
                held.append(event)

        cancel_event = asyncio.Event()
        gate = self._gate(inp)
        task = asyncio.create_task(
            self.deps.pipeline.execute(
                inp.prepared, cancel_event=cancel_event, emit=emit, approver=gate
            )
        )
        try:
            run = await self._await_with_cancel(task, cancel_event)
        except SubCallParked as parked:
            assert gate is not None
            return self._parked(inp, parked, gate, pending, lead)
        # The tool has run: what it did is recorded and returned whatever
        # arrives now. A cancellation reaches this task only with a heartbeat
        # response, which may come after the tool's write; aborting the final
        # store write then would end the call `cancelled` with its effect done.
        return await _despite_cancellation(
            self._outcome(inp, run, called, held, pending, lead)
        )

    def _parked(
        self,
        inp: ExecuteInput,
        parked: SubCallParked,
        gate: DurableGate,
        pending: list[ToolEvent],
        lead: Lead,
    ) -> ExecuteOutput:
        """The run stopped at a sub-call that needs a human: nothing is running;
        the workflow waits for the decision, then resumes the run."""
        sub = parked.sub
        text = f"Waiting for a decision on sub-call {sub.prepared.call.id}."
        return ExecuteOutput(
            result=ToolResultBlock(tool_use_id=inp.prepared.call.id,
                                   content=[TextBlock(text=text)]),
            error_class=None,
            resolved_recorded=lead.recorded,
            parked=SubCallPark(
                sub=sub,
                expiry_seconds=approval_expiry(sub.prepared.definition, self.deps.settings),
                steps=gate.steps,
                pending_events=list(pending),
            ),
        )

    async def _outcome(
        self,
        inp: ExecuteInput,
        run: ToolRun,
        called: DeferredCalled,
        held: list[ToolEvent],
        pending: list[ToolEvent],
        lead: Lead,
    ) -> ExecuteOutput:
        """Store the final event and row of a run that happened, and report it."""
        if inp.edit_note:
            # The model must not read the output as that of the input it sent.
            note = TextBlock(text=inp.edit_note)
            run = run.model_copy(update={"result": run.result.model_copy(
                update={"content": [note, *run.result.content]})})
        full = run.output.model_dump(mode="json") if run.output else None
        row = self._final_row(inp, run, full)
        carried: dict[str, Any] | None = None
        stored = await self._store([*await called.settle(), *held], row, pending, lead=lead)
        if not stored:
            log.warning("store unavailable; results of %s travel back", inp.prepared.call.id)
            if full is not None and len(json.dumps(full, default=str)) <= _CARRY_OUTPUT_BYTES:
                carried = full
        return ExecuteOutput(
            result=run.result,
            error_class=run.error_class,
            started_at=run.started_at,
            duration_ms=run.duration_ms,
            pending_events=pending,
            full_output=carried,
            recorded=stored and _records_final(inp),
            resolved_recorded=lead.recorded,
        )

    async def _store_resolved(self, inp: ExecuteInput, pending: list[ToolEvent]) -> Lead:
        """ExecuteInput.resolved (approval row, event, call row) as the run's Lead.

        A plain decision on a store that writes it with other rows in one
        transaction (`apply_decided`) is left to the run's first write; else it
        is written now (not recorded when the store is down: its events then
        lead `pending`)."""
        res = inp.resolved
        if res is None:
            return Lead(None)
        row = record_row(res)
        # An approver's edit is charged, not the input it replaced.
        await reprice_if_up(self.deps.store, self.deps.settings.budgets, row)
        if self._joinable(res):
            return Lead(res)
        lead = Lead(None)
        try:
            await write_approval(self.deps.store, res)
            await self.deps.store.apply(res.events, row)
        except Exception:
            log.warning("store unavailable; the decision of %s travels back", inp.prepared.call.id)
            pending.extend(res.events)
            lead.recorded = False
        return lead

    def _joinable(self, res: RecordInput) -> bool:
        """Whether `res` can ride with the run's first write (store/repository.py
        `apply_decided`): a decision only, no remembered rule to create."""
        approval = res.approval
        return (
            hasattr(self.deps.store, "apply_decided")
            and approval is not None
            and approval.decision is not None
            and res.approval_decision_only
            and res.remember is None
        )

    @staticmethod
    def _final_row(inp: ExecuteInput, run: ToolRun, full: dict[str, Any] | None) -> CallUpdate:
        """The row written with the final event: the whole final state when the
        workflow named the call (`inp.ref`), else just the output and timings."""
        timings: dict[str, Any] = {
            "full_output": full,
            "started_at": run.started_at,
            "duration_ms": run.duration_ms or None,
        }
        if inp.ref is not None and inp.final is None:
            end = CallEnd(result=run.result, status=status_for(run.error_class),
                          error_class=run.error_class, duration_ms=run.duration_ms)
            final = ended(inp.ref, end, started_at=run.started_at, finished_at=utcnow(),
                          request_id=inp.request_id, full_output=full)
            # A read's deferred tool.called shares this write: it may be the first.
            return _with_opening(inp, inp.ref, final)
        if inp.final is None:
            session_id = inp.prepared.session.session_id
            return CallUpdate(session_id=session_id, tool_use_id=inp.prepared.call.id, **timings)
        return inp.final.model_copy(
            update={
                **timings,
                "status": status_for(run.error_class),
                "error_class": run.error_class,
                "result": run.result,
                "finished_at": utcnow(),
            }
        )

    @staticmethod
    def _gate(inp: ExecuteInput) -> DurableGate | None:
        """Non-atomic composed tools run by a workflow that waits for their
        sub-calls' decisions (see subcall_gate.py). Atomic ones need none (the
        parent's approval covers them); without one, a prompted sub-call is refused."""
        if not parks_sub_calls(inp.prepared.definition) or not inp.park_sub_calls:
            return None
        return DurableGate(inp)

    @staticmethod
    def _running_row(inp: ExecuteInput, event: ToolEvent) -> CallUpdate:
        if inp.ref is not None and inp.initial is None:
            return _with_opening(inp, inp.ref, running(inp.ref, event.at))
        base = inp.initial or CallUpdate(
            session_id=event.session_id, tool_use_id=event.tool_use_id
        )
        return base.model_copy(update={"status": CallStatus.RUNNING, "started_at": event.at})

    async def _await_with_cancel(
        self, task: asyncio.Task[ToolRun], cancel_event: asyncio.Event
    ) -> ToolRun:
        """Await the pipeline; on cancellation let the tool clean up, then return its run."""
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and not task.cancelled():
                return task.result()
            cancel_event.set()
        grace = self.deps.settings.cancel_grace_seconds + _ABANDON_MARGIN
        done, _ = await asyncio.wait({task}, timeout=grace)
        if done and not task.cancelled():
            return task.result()
        log.warning("tool did not stop within %.0fs of cancellation; abandoned", grace)
        task.cancel()
        raise asyncio.CancelledError("tool abandoned after the cancellation grace period")

    async def _emit(
        self,
        event: ToolEvent,
        pending: list[ToolEvent],
        update: CallUpdate | None = None,
        *,
        retry: bool = False,
        lead: Lead | None = None,
    ) -> None:
        """Store an event now (live streams see it); keep it for the workflow if the
        store is down, so the tool's run is never failed by a history outage."""
        if not await self._store([event], update, pending, retry=retry, lead=lead):
            log.warning("store unavailable; %s travels back to the workflow", event.type)

    async def _store(
        self,
        events: list[ToolEvent],
        update: CallUpdate | None,
        pending: list[ToolEvent],
        *,
        retry: bool = False,
        lead: Lead | None = None,
    ) -> bool:
        """Write events + row; on failure (or after an earlier failure, to keep the
        order) the events join `pending`. True when written.

        With `retry`, an earlier failure does not stop the attempt: what is pending
        is written first, in order, and no longer travels back.

        A `lead` not stored yet goes first, in the same transaction."""
        resolved = lead.take() if lead is not None else None
        first = resolved.events if resolved is not None else []
        if pending and not retry:
            pending[:0] = first
            pending.extend(events)
            return False
        batch = [*first, *pending, *events]
        try:
            if resolved is not None and resolved.approval is not None:
                apply_decided = self.deps.store.apply_decided  # type: ignore[attr-defined]
                await apply_decided(resolved.approval, batch, merged(record_row(resolved), update))
            else:
                await self.deps.store.apply(batch, update)
        except Exception:
            log.debug("store write failed", exc_info=True)
            pending[:] = batch
            return False
        if lead is not None and resolved is not None:
            lead.recorded = True
        pending.clear()
        return True

    async def _refuse(
        self, inp: ExecuteInput, pending: list[ToolEvent], lead: Lead
    ) -> ExecuteOutput:
        call, session = inp.prepared.call, inp.prepared.session
        text = (
            "Refusing to run: the input differs from the approved input "
            "(argument hash mismatch)."
        )
        await self._emit(
            ToolEvent(
                type="tool.failed",
                session_id=session.session_id,
                turn_id=session.turn_id,
                tool_use_id=call.id,
                tool_name=call.name,
                side_effects=inp.prepared.definition.side_effects,
                error_class=ToolErrorClass.PERMISSION_DENIED,
                message=text,
            ),
            pending,
            lead=lead,
        )
        return ExecuteOutput(
            result=ToolResultBlock(
                tool_use_id=call.id,
                content=[TextBlock(text=text)],
                is_error=True,
                error_class=ToolErrorClass.PERMISSION_DENIED,
            ),
            error_class=ToolErrorClass.PERMISSION_DENIED,
            pending_events=pending,
        )
