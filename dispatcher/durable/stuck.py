"""Calls whose workflow task cannot heal: find them, say why, end them honestly.

Temporal retries a failed workflow task forever. That is right when a deploy
can fix it (a non-determinism error, a bug in workflow code: the next worker
version heals the task), and wrong when nothing ever will: the same input is
decoded, or the same oversized completion is sent, on every attempt. Such a
call used to hang: no status query answered, a cancel request was never
delivered (it needs a workflow task that completes), and the call never
reached the store.

`diagnose` reads what Temporal knows about a call's pending workflow task
(DescribeWorkflowExecution: its attempt; the history: the first failure of the
run of failures, which Temporal records once per run of failures) and says
whether retrying can fix it. `end_call` writes the call's final row and a
`tool.failed` event naming the reason (unless the call already has a final
event), then terminates the workflow: a cancel of such a call, and the
`TaskHealer` loop every worker runs, end it that way. See docs/DURABLE.md
("A task that cannot heal").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallStatus, CallUpdate, RecordedFinish
from parkgate.durable import stuck_subcall
from parkgate.durable.payloads import (
    CALL_WORKFLOW,
    SUBCALL_WORKFLOW,
    TURN_WORKFLOW,
    CallInput,
    TurnInput,
    call_workflow_id,
)
from parkgate.durable.periodic import in_background, ticks
from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock, utcnow
from parkgate.settings import Settings
from parkgate.store.results import CallRecord

log = logging.getLogger("parkgate.durable.stuck")

#: Causes Temporal reports when a completion can never be accepted: the same
#: oversized payload or request would be sent again on every attempt.
_TOO_LARGE = frozenset(
    {
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_PAYLOADS_TOO_LARGE,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_GRPC_MESSAGE_TOO_LARGE,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_REQUEST_TOO_LARGE,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_BAD_SIGNAL_INPUT_SIZE,
    }
)
#: Words of the server's and the SDK's size-limit messages (a command whose
#: payload exceeds the blob limit fails as BAD_*_ATTRIBUTES with one of these).
_SIZE_MARKERS = ("TMPRL1103", "exceeds size limit", "size exceeds", "too large")
_UNHANDLED = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
#: The failure type `parkgate.durable.codec` raises for a payload it cannot decrypt.
_CODEC_ERROR = "CodecError"
#: The SDK's message when a payload decrypts but does not convert to the
#: workflow's input model (temporalio.worker._workflow_instance).
_UNCONVERTIBLE = "Failed decoding arguments"
#: Placeholders for a call whose input could not be read at all.
UNKNOWN = "unknown"


@dataclass(frozen=True)
class TaskTrouble:
    """A call's workflow task that has failed at least once and not succeeded since."""

    workflow_id: str
    run_id: str
    #: The attempt Temporal is on now (2 = one failure so far).
    attempt: int
    #: The WorkflowTaskFailedCause name without its prefix (or "timed out").
    cause: str
    #: The failure message (first line) the worker or server reported.
    message: str
    #: False when no retry can fix it (see `assess`).
    heals: bool
    #: What the call's row and event say, for a task that cannot heal.
    reason: str
    #: The reason without its "the call's workflow cannot proceed: " prefix.
    why: str = ""
    #: Someone asked to cancel the call (a request its workflow never saw).
    cancel_requested: bool = False
    #: The workflow's type (a call, a turn, a sub-call's approval).
    workflow_type: str = ""

    @property
    def failures(self) -> int:
        return self.attempt - 1

    def describe(self) -> str:
        verdict = "cannot heal" if not self.heals else "may heal with a deploy"
        return (
            f"workflow task failing ({self.failures} failed attempt(s), {verdict}): "
            f"{self.cause}: {self.message}"
        )


def assess(cause: int, failure: Failure | None) -> tuple[bool, str]:
    """(heals, reason) for one workflow task failure.

    Cannot heal: a payload or request over Temporal's size limits, and input
    the worker cannot decode (a payload under a key id it does not have, a
    tampered payload, a payload that does not convert to the input model).
    Everything else — a non-determinism error, an exception in workflow code,
    a timeout — is left to retry: a deploy or a restart fixes those.
    """
    message = _first_line(failure.message) if failure is not None else ""
    kind = failure.application_failure_info.type if failure is not None else ""
    if cause in _TOO_LARGE or any(m.lower() in message.lower() for m in _SIZE_MARKERS):
        return False, f"a payload is too large for Temporal ({message or _cause_name(cause)})"
    if cause == _UNHANDLED:
        if kind == _CODEC_ERROR:
            return False, f"its input cannot be decoded ({message})"
        if message.startswith(_UNCONVERTIBLE):
            detail = _first_line(failure.cause.message) if failure and failure.cause.message else ""
            return False, "its input cannot be decoded" + (f" ({detail})" if detail else "")
    return True, message or _cause_name(cause)


async def diagnose(
    client: Client, workflow_id: str, run_id: str | None = None
) -> TaskTrouble | None:
    """The trouble of a running workflow whose task keeps failing, or None.

    None when the workflow is not running, has no pending workflow task, or
    is on its first attempt (nothing failed yet). Raises RPCError NOT_FOUND
    for an unknown workflow.
    """
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    pending = desc.raw_description.pending_workflow_task
    if pending.attempt < 2:
        return None
    last: HistoryEvent | None = None
    cancel_requested = False
    run = client.get_workflow_handle(workflow_id, run_id=desc.run_id)
    async for event in run.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED:
            cancel_requested = True
        elif event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
        ):
            last = event
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            last = None
    if last is None:
        return None  # the attempt count is from a task that healed meanwhile
    if last.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        heals, cause, message = True, "timed out", "the workflow task timed out"
    else:
        attrs = last.workflow_task_failed_event_attributes
        heals, message = assess(attrs.cause, attrs.failure)
        cause = _cause_name(attrs.cause)
        if not heals:
            message = _first_line(attrs.failure.message) or cause
            inner = attrs.failure.cause.message if attrs.failure.HasField("cause") else ""
            if message.startswith(_UNCONVERTIBLE) and inner:
                # The payload the codec refused says why (parkgate.durable.codec).
                message += f" ({_first_line(inner)})"
    why = _reason_of(last)
    reason = f"the call's workflow cannot proceed: {why}"
    return TaskTrouble(
        workflow_id=workflow_id,
        run_id=desc.run_id,
        attempt=pending.attempt,
        cause=cause,
        message=message,
        heals=heals,
        reason=reason,
        why=why,
        cancel_requested=cancel_requested,
        workflow_type=desc.workflow_type,
    )


class FinalStore(Protocol):
    """What ending a call needs from the history store (the Repository has it)."""

    async def get_call(self, session_id: str, tool_use_id: str) -> CallRecord | None: ...

    async def record_unless_finished(
        self, events: Sequence[ToolEvent], update: CallUpdate
    ) -> RecordedFinish | None: ...


def can_end(store: object) -> bool:
    """True when `store` offers what `end_call` writes with."""
    return callable(getattr(store, "get_call", None)) and callable(
        getattr(store, "record_unless_finished", None)
    )


async def end_call(
    client: Client, store: FinalStore, trouble: TaskTrouble, *, cancelled: bool = False
) -> bool:
    """Record the call's end, then terminate its workflow; False if it had ended already.

    The store is written first: if this process dies before the terminate,
    the next sweep finds the call still wedged and repeats both (the write is
    idempotent). A call that already has its final event keeps it. A turn
    workflow (`turn/...`) is handed to `end_turn`, a sub-call's approval to
    `end_sub_call`.
    """
    if trouble.workflow_id.startswith("turn/"):
        return await end_turn(client, store, trouble, cancelled=cancelled)
    if trouble.workflow_type == SUBCALL_WORKFLOW:
        return await end_sub_call(client, store, trouble)
    session_id, tool_use_id = call_ids(trouble.workflow_id)
    row = await store.get_call(session_id, tool_use_id)
    tool_name, turn_id = await call_names(client, row, trouble.workflow_id, trouble.run_id)
    existing = await _record_end(
        store, trouble, session_id, tool_use_id, tool_name, turn_id,
        cancelled=cancelled, workflow_id=trouble.workflow_id, run_id=trouble.run_id,
    )
    return await _terminate(client, trouble, cancelled) and existing is None


async def end_turn(
    client: Client, store: FinalStore, trouble: TaskTrouble, *, cancelled: bool = False
) -> bool:
    """End a batch whose turn workflow task cannot heal: every call of it that has
    no call workflow yet is recorded as ended (a call that has one ends on its
    own: terminating the turn requests its cancellation); then the turn is
    terminated. An input that cannot be read at all names no calls to record."""
    session_id, _ = call_ids(trouble.workflow_id)
    inp = await start_input(client, trouble.workflow_id, trouble.run_id, TurnInput)
    if isinstance(inp, TurnInput):
        for call in inp.calls:
            try:
                await client.get_workflow_handle(call_workflow_id(session_id, call.id)).describe()
                continue
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
            await _record_end(
                store, trouble, session_id, call.id, call.name, inp.session.turn_id,
                cancelled=cancelled, workflow_id=None, run_id=None,
            )
    return await _terminate(client, trouble, cancelled)


async def end_sub_call(client: Client, store: FinalStore, trouble: TaskTrouble) -> bool:
    """End a composed tool's sub-call approval that cannot heal: its stored
    request is closed (parkgate.durable.stuck_subcall), then the child is
    terminated; its parent call then refuses the sub-call and goes on."""
    await stuck_subcall.close_request(store, trouble.workflow_id, trouble.reason)
    return await _terminate(client, trouble, cancelled=False)


async def _record_end(
    store: FinalStore,
    trouble: TaskTrouble,
    session_id: str,
    tool_use_id: str,
    tool_name: str,
    turn_id: str,
    *,
    cancelled: bool,
    workflow_id: str | None,
    run_id: str | None,
) -> RecordedFinish | None:
    """The final row and tool.failed event of a call that never ran."""
    if cancelled:
        error_class, status = ToolErrorClass.CANCELLED, CallStatus.CANCELLED
        text = f"The call was cancelled; it did not run ({trouble.reason})."
    else:
        error_class, status = ToolErrorClass.EXECUTION_ERROR, CallStatus.FAILED
        text = f"The call did not run; its workflow cannot proceed: {trouble.why}."
    result = ToolResultBlock(
        tool_use_id=tool_use_id, content=[TextBlock(text=text)], is_error=True,
        error_class=error_class,
    )
    now = utcnow()
    data: dict[str, Any] = {
        "workflow_task": {
            "workflow_id": trouble.workflow_id, "cause": trouble.cause,
            "message": trouble.message[:2000], "failed_attempts": trouble.failures,
            "heals": trouble.heals,
        },
        "ended_by": "cancel" if cancelled else "task_healer",
    }
    event = ToolEvent(
        type="tool.failed", session_id=session_id, turn_id=turn_id, tool_use_id=tool_use_id,
        tool_name=tool_name, error_class=error_class, message=text, data=data, at=now,
    )
    update = CallUpdate(
        session_id=session_id, tool_use_id=tool_use_id, turn_id=turn_id, tool_name=tool_name,
        status=status, error_class=error_class, result=result, workflow_id=workflow_id,
        run_id=run_id, finished_at=now, reason=trouble.reason,
    )
    return await store.record_unless_finished([event], update)


async def _terminate(client: Client, trouble: TaskTrouble, cancelled: bool) -> bool:
    """Terminate the workflow with the reason; False when it had already ended."""
    handle = client.get_workflow_handle(trouble.workflow_id, run_id=trouble.run_id)
    try:
        await handle.terminate(reason=f"parkgate: {trouble.reason}"[:1000])
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        return False
    log.warning(
        "ended %s (%s): %s", trouble.workflow_id, "cancelled" if cancelled else "failed",
        trouble.reason,
    )
    return True


# ---------------------------------------------------------------------------
# the loop every worker runs
# ---------------------------------------------------------------------------


class TaskHealer:
    """Every `stuck_task_check_seconds`, end this task queue's calls (turns,
    sub-call approvals) whose workflow task failed `stuck_task_failures` times for a reason retrying
    cannot fix; log (once per attempt count) the ones a deploy may heal."""

    def __init__(self, client: Client, settings: Settings, store: FinalStore) -> None:
        self.client = client
        self.settings = settings
        self.store = store
        self._flagged: bool | None = None
        self._reported: dict[str, int] = {}

    async def _use_flag(self) -> bool:
        """Narrow the sweep to calls Temporal flags (TemporalReportedProblems)
        when settings allow it and the server has the flag."""
        if not self.settings.stuck_task_flagged_only:
            return False
        if self._flagged is None:
            from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

            try:
                resp = await self.client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.client.namespace)
                )
                self._flagged = bool(
                    resp.namespace_info.capabilities.reported_problems_search_attribute
                )
            except RPCError:
                return False
        return self._flagged

    async def query(self) -> str:
        queue = self.settings.temporal_task_queue.replace("'", "\\'")
        query = (
            f"WorkflowType IN ('{CALL_WORKFLOW}', '{TURN_WORKFLOW}', '{SUBCALL_WORKFLOW}') "
            f"AND TaskQueue = '{queue}' "
            "AND ExecutionStatus = 'Running'"
        )
        if await self._use_flag():
            query += " AND TemporalReportedProblems IS NOT NULL"
        return query

    async def sweep(self) -> list[TaskTrouble]:
        """One pass; returns the troubles of the calls it ended."""
        ended: list[TaskTrouble] = []
        threshold = self.settings.stuck_task_failures
        seen: set[str] = set()
        async for execution in self.client.list_workflows(await self.query()):
            seen.add(execution.id)
            try:
                trouble = await diagnose(self.client, execution.id, execution.run_id)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    continue
                raise
            if trouble is None or trouble.failures < threshold:
                continue
            if trouble.heals:
                if self._reported.get(trouble.workflow_id) != trouble.attempt:
                    self._reported[trouble.workflow_id] = trouble.attempt
                    log.warning("call %s is stuck: %s", trouble.workflow_id, trouble.describe())
                continue
            try:
                if await end_call(
                    self.client, self.store, trouble, cancelled=trouble.cancel_requested
                ):
                    ended.append(trouble)
            except Exception:  # one call's failure (store down) must not stop the rest
                log.exception("could not end stuck call %s; retrying next sweep", execution.id)
        self._reported = {k: v for k, v in self._reported.items() if k in seen}
        return ended

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep until `stop` is set; a failed sweep is logged and retried next time."""
        interval = self.settings.stuck_task_check_seconds
        async for _ in ticks(interval, stop):
            try:
                await self.sweep()
            except Exception:  # the loop must outlive one bad pass
                log.exception("stuck-call sweep failed; retrying in %.0f s", interval)


@contextlib.asynccontextmanager
async def healing(client: Client, settings: Settings, store: object) -> Any:
    """Run a TaskHealer for the duration of the block (off when the interval is 0)."""
    if settings.stuck_task_check_seconds <= 0 or not can_end(store):
        yield None
        return
    healer = TaskHealer(client, settings, store)  # type: ignore[arg-type]
    async with in_background("parkgate-task-healer", healer.run):
        yield healer


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def call_ids(workflow_id: str) -> tuple[str, str]:
    """(session_id, tool_use_id) of `call/{session_id}/{tool_use_id}`."""
    _, _, rest = workflow_id.partition("/")
    session_id, _, tool_use_id = rest.partition("/")
    return session_id, tool_use_id


async def call_names(client: Client, row: CallRecord | None, workflow_id: str,
                     run_id: str) -> tuple[str, str]:
    """A call's tool name and turn id for its end: from its row, else from its
    workflow's start input, else `unknown` (an input that does not decode)."""
    tool_name, turn_id = (row.tool_name, row.turn_id) if row else (None, None)
    if not tool_name or not turn_id:
        inp = await start_input(client, workflow_id, run_id, CallInput)
        if isinstance(inp, CallInput):
            tool_name, turn_id = tool_name or inp.call.name, turn_id or inp.session.turn_id
    return tool_name or UNKNOWN, turn_id or UNKNOWN


async def start_input(client: Client, workflow_id: str, run_id: str, kind: type[Any]) -> Any:
    """The workflow's start input as `kind`, or None when it does not decode."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    with contextlib.suppress(Exception):
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [inp] = await client.data_converter.decode(payloads[:1], [kind])
            return inp
    return None


def _reason_of(event: HistoryEvent) -> str:
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        return "its workflow task keeps timing out"
    attrs = event.workflow_task_failed_event_attributes
    return assess(attrs.cause, attrs.failure)[1]


def _cause_name(cause: int) -> str:
    try:
        name = WorkflowTaskFailedCause.Name(cause)  # type: ignore[arg-type]
    except ValueError:
        return f"cause {cause}"
    return name.removeprefix("WORKFLOW_TASK_FAILED_CAUSE_").lower()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:500] if text.strip() else ""
