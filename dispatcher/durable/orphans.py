"""Calls whose workflow ended from outside: give their stored row its end.

A call's workflow writes the row's final state before it completes, on every
path it controls (deny, expiry, cancellation, a lost worker). A workflow ended
from outside never gets there: `temporal workflow terminate`, a run timeout,
a reset that failed, the parent of a batch terminated by hand. Its row then
says `parked` or `running` for ever: the call is listed as open, its budget
reservation is never released, and an agent long-polling it waits out its
own deadline.

Beside the stuck-task sweep, every worker lists (visibility) this task
queue's call workflows that closed other than Completed since its last pass,
and gives each whose row is still live the end Temporal's history tells:
`outcome_unknown` when the call may have started (a start time, or claimed
by a client), else `failed` (`cancelled` for a cancelled run): it never ran.
The `tool.failed` event names the close (terminated, timed out, failed,
cancelled), its reason and who asked (the terminate's identity), and the
row's write settles the call's budget charges like any final row. Terminating
a call is still the wrong way to end it (`parkgate calls cancel` is the
right one); this keeps the record honest when someone does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallStatus, CallUpdate
from parkgate.durable.payloads import CALL_WORKFLOW
from parkgate.durable.periodic import in_background, ticks
from parkgate.durable.stuck import FinalStore, call_ids, call_names, can_end
from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock, utcnow
from parkgate.settings import Settings
from parkgate.store.results import CallRecord

log = logging.getLogger("parkgate.durable.orphans")

#: How far back the first pass of a process looks (later passes start where
#: the last one did). Visibility keeps closed runs for the namespace's
#: retention, which is shorter by default.
FIRST_LOOKBACK = timedelta(days=7)
#: Each pass looks this far behind the previous pass's start: visibility is
#: written a moment after a workflow closes.
OVERLAP = timedelta(minutes=2)
#: Statuses a call workflow ends in without having written its row's end.
_ENDED_FROM_OUTSIDE = ("Terminated", "TimedOut", "Failed", "Canceled")
#: Row statuses after which the call may have run on its client or worker.
_MAY_HAVE_RUN = (CallStatus.RUNNING, CallStatus.CLAIMED)



@dataclass(frozen=True)
class Close:
    """How a workflow ended, from the last event of its history."""

    status: str  # terminated | timed_out | failed | cancelled
    reason: str
    identity: str


@dataclass(frozen=True)
class Orphan:
    """One call whose workflow ended from outside and whose row was given its end."""

    workflow_id: str
    status: CallStatus
    close: Close



def close_of(event: HistoryEvent | None, status: WorkflowExecutionStatus | None) -> Close:
    """The close a history's last event records (the visibility status when the
    history is gone)."""
    if event is not None:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            attrs = event.workflow_execution_terminated_event_attributes
            return Close("terminated", attrs.reason, attrs.identity)
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            return Close("timed_out", "the workflow's execution or run timeout passed", "")
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            failure = event.workflow_execution_failed_event_attributes.failure
            return Close("failed", failure.message, "")
        if kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            return Close("cancelled", "the workflow was cancelled", "")
    name = status.name.lower() if status is not None else "ended"
    return Close(name, f"the workflow ended ({name})", "")


def ending(row: CallRecord | None, close: Close, workflow_id: str, run_id: str,
           session_id: str, tool_use_id: str, tool_name: str, turn_id: str,
           ) -> tuple[ToolEvent, CallUpdate]:
    """The final event and row of a call whose workflow ended from outside."""
    said = f"{close.reason} (by {close.identity})" if close.identity else close.reason
    may_have_run = row is not None and (row.started_at is not None
                                        or row.status in _MAY_HAVE_RUN)
    if may_have_run:
        status, error_class = CallStatus.OUTCOME_UNKNOWN, ToolErrorClass.EXECUTION_ERROR
        text = (f"The call's workflow was {close.status.replace('_', ' ')} while the call "
                f"may have been running: it may have run, and its outcome is unknown: {said}.")
    elif close.status == "cancelled":
        status, error_class = CallStatus.CANCELLED, ToolErrorClass.CANCELLED
        text = f"The call was cancelled; it did not run: {said}."
    else:
        status, error_class = CallStatus.FAILED, ToolErrorClass.EXECUTION_ERROR
        text = (f"The call did not run: its workflow was {close.status.replace('_', ' ')} "
                f"from outside parkgate: {said}.")
    now = utcnow()
    result = ToolResultBlock(tool_use_id=tool_use_id, content=[TextBlock(text=text)],
                             is_error=True, error_class=error_class)
    data: dict[str, Any] = {
        "workflow": {"workflow_id": workflow_id, "run_id": run_id, "closed": close.status,
                     "reason": close.reason[:2000], "identity": close.identity[:200]},
        "ended_by": "orphan_sweep",
        "may_have_run": may_have_run,
    }
    event = ToolEvent(type="tool.failed", session_id=session_id, turn_id=turn_id,
                      tool_use_id=tool_use_id, tool_name=tool_name, error_class=error_class,
                      message=text, data=data, at=now)
    update = CallUpdate(session_id=session_id, tool_use_id=tool_use_id, turn_id=turn_id,
                        tool_name=tool_name, status=status, error_class=error_class,
                        result=result, workflow_id=workflow_id, run_id=run_id,
                        finished_at=now, reason=close.reason[:1000] or None)
    return event, update


class OrphanSweep:
    """Every pass: this task queue's call workflows closed other than Completed
    since the last pass, each whose row is live given its end."""

    def __init__(self, client: Client, settings: Settings, store: FinalStore) -> None:
        self.client = client
        self.settings = settings
        self.store = store
        self.since = datetime.now(UTC) - FIRST_LOOKBACK

    def query(self, since: datetime) -> str:
        queue = self.settings.temporal_task_queue.replace("'", "\\'")
        statuses = ", ".join(f"'{s}'" for s in _ENDED_FROM_OUTSIDE)
        stamp = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return (f"WorkflowType = '{CALL_WORKFLOW}' AND TaskQueue = '{queue}' "
                f"AND ExecutionStatus IN ({statuses}) AND CloseTime >= '{stamp}'")

    async def sweep(self) -> list[Orphan]:
        """One pass; the calls it gave an end. A call that fails to record is
        retried next pass (the pass's window does not move past it)."""
        started = datetime.now(UTC)
        found: list[Orphan] = []
        failed = False
        async for execution in self.client.list_workflows(self.query(self.since - OVERLAP)):
            try:
                orphan = await self._end(execution.id, execution.run_id, execution.status)
            except Exception:  # one call's failure (store down) must not stop the rest
                log.exception("could not record the end of %s; retrying next pass",
                              execution.id)
                failed = True
                continue
            if orphan is not None:
                found.append(orphan)
        if not failed:
            self.since = started
        return found

    async def _end(self, workflow_id: str, run_id: str,
                   status: WorkflowExecutionStatus | None) -> Orphan | None:
        session_id, tool_use_id = call_ids(workflow_id)
        row = await self.store.get_call(session_id, tool_use_id)
        if row is not None and row.status.terminal:
            return None
        last = await self._last_event(workflow_id, run_id)
        close = close_of(last, status)
        tool_name, turn_id = await call_names(self.client, row, workflow_id, run_id)
        event, update = ending(row, close, workflow_id, run_id, session_id, tool_use_id,
                               tool_name, turn_id)
        if await self.store.record_unless_finished([event], update) is not None:
            return None  # its end was written meanwhile
        assert update.status is not None
        log.warning("call %s's workflow was %s from outside parkgate (%s); recorded %s",
                    workflow_id, close.status, close.reason or "no reason given",
                    update.status.value)
        return Orphan(workflow_id, update.status, close)

    async def _last_event(self, workflow_id: str, run_id: str) -> HistoryEvent | None:
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self.client.namespace,
            execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            maximum_page_size=1,
        )
        try:
            response = await self.client.workflow_service.get_workflow_execution_history_reverse(
                request)
        except RPCError:
            return None  # gone past retention: the visibility status says enough
        return response.history.events[0] if response.history.events else None

    async def run(self, stop: asyncio.Event) -> None:
        """A pass at once, then one every `stuck_task_check_seconds`, until `stop`."""
        interval = self.settings.stuck_task_check_seconds
        await self._pass(interval)
        async for _ in ticks(interval, stop):
            await self._pass(interval)

    async def _pass(self, interval: float) -> None:
        try:
            await self.sweep()
        except Exception:  # the loop must outlive one bad pass (Temporal away)
            log.exception("orphaned-call sweep failed; retrying in %.0f s", interval)


@contextlib.asynccontextmanager
async def sweeping_orphans(client: Client, settings: Settings,
                           store: object) -> AsyncIterator[OrphanSweep | None]:
    """Run an OrphanSweep for the duration of the block (off with the stuck-task
    sweep: `stuck_task_check_seconds: 0`, or a store that cannot write ends)."""
    if settings.stuck_task_check_seconds <= 0 or not can_end(store):
        yield None
        return
    sweep = OrphanSweep(client, settings, store)  # type: ignore[arg-type]
    async with in_background("parkgate-orphan-sweep", sweep.run):
        yield sweep
