"""DurableDispatcher: the in-process ToolDispatcher's API, backed by Temporal workflows.

An agent loop switches with one line (`ToolDispatcher(...)` ->
`DurableDispatcher(client, settings, ...)`). Every call is the workflow
`call/{session_id}/{tool_use_id}`: submitting the same call again attaches to
that workflow and returns its outcome, so an agent that restarts simply
resubmits (or calls `attach`) and never runs a tool twice.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from parkgate.approvals.decisions import DECISIONS
from parkgate.approvals.links import approval_url
from parkgate.calls.cancellation import Cancellation
from parkgate.calls.records import CallStatus
from parkgate.durable import stuck
from parkgate.durable.call_errors import UnknownCallError
from parkgate.durable.client_payloads import ClaimInput
from parkgate.durable.deciding import ApprovalLookup, DecisionSending
from parkgate.durable.payloads import (
    CALL_WORKFLOW,
    QUERY_STATUS,
    SUBCALL_WORKFLOW,
    TURN_WORKFLOW,
    CallInput,
    CallOutcome,
    CallStatusView,
    StatusRequest,
    TurnInput,
    TurnOutcome,
    call_workflow_id,
    session_call_prefix,
    turn_workflow_id,
)
from parkgate.models import Session, ToolDefinition, ToolResultBlock, ToolUseBlock, input_hash
from parkgate.settings import Settings


class DefinitionSource(Protocol):
    def definitions_for(self, session: Session) -> list[ToolDefinition]: ...


T = TypeVar("T")


class IdempotencyConflictError(ValueError):
    """A tool_use_id reused for another call (other tool name or other input).

    Resubmitting the same call attaches to it; a different call under the same
    id would silently get the first call's result, so it is refused instead.
    """

    def __init__(
        self, tool_use_id: str, existing: tuple[str, str], submitted: tuple[str, str]
    ) -> None:
        self.tool_use_id = tool_use_id
        self.existing_tool, self.existing_hash = existing
        self.submitted_tool, self.submitted_hash = submitted
        super().__init__(
            f"tool_use_id {tool_use_id!r} was already used for another call "
            f"({self.existing_tool}, input hash {self.existing_hash}); this one is "
            f"{self.submitted_tool} with input hash {self.submitted_hash}"
        )


@dataclass(frozen=True)
class TurnStart:
    """A batch as `DurableDispatcher.start_turn` started it."""

    #: The turn workflow running the batch's own calls; None when every call
    #: already existed elsewhere.
    handle: WorkflowHandle[Any, TurnOutcome] | None
    #: The calls the turn workflow runs, in input order.
    calls: list[ToolUseBlock]
    #: Calls that existed before, submitted alone or in another turn or batch:
    #: attached, not run again. tool_use_id -> the turn the call belongs to.
    attached: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _ExistingCall:
    """A call workflow found under a submitted id."""

    turn_id: str
    #: The workflow that started it as a child ("" when started on its own).
    parent_id: str


def turn_key(session: Session, tool_uses: Sequence[ToolUseBlock]) -> str:
    """Stable key of one batch: the turn id plus a hash of its tool_use ids."""
    digest = hashlib.sha256("\x1f".join(t.id for t in tool_uses).encode()).hexdigest()[:16]
    return f"{session.turn_id}/{digest}"


class DurableDispatcher(DecisionSending):
    """Dispatch tool calls as Temporal workflows; same methods as ToolDispatcher."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        *,
        registry: DefinitionSource | None = None,
        approvals: ApprovalLookup | None = None,
        eager_start: bool = False,
    ) -> None:
        """`eager_start=True` when a worker for the task queue runs in this process:
        the first workflow task then runs here without a round trip."""
        self.client = client
        self.settings = settings
        self.registry = registry
        self.approvals = approvals
        self.eager_start = eager_start

    @property
    def task_queue(self) -> str:
        return self.settings.temporal_task_queue

    # ----------------------------------------------------------- starting
    async def start(
        self, tool_use: ToolUseBlock, session: Session,
        client_tools: Sequence[ToolDefinition] = (), claim: ClaimInput | None = None,
    ) -> WorkflowHandle[Any, CallOutcome]:
        """Start the call's workflow, or attach to it when it already exists.

        `client_tools`: the session's tools its client runs (one named by the
        call makes it a client-executed call); `claim`: its submitter's claim,
        taken at the release (CallInput.claim)."""
        workflow_id = call_workflow_id(session.session_id, tool_use.id)
        try:
            handle: WorkflowHandle[Any, CallOutcome] = await self.client.start_workflow(
                CALL_WORKFLOW,
                CallInput(call=tool_use, session=session,
                          client_tool=next((t for t in client_tools
                                            if t.name == tool_use.name), None), claim=claim),
                id=workflow_id,
                task_queue=self.task_queue,
                result_type=CallOutcome,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                request_eager_start=self.eager_start,
            )
        except WorkflowAlreadyStartedError:
            # Closed already: attach to the finished run and read its outcome.
            handle = self.client.get_workflow_handle(workflow_id, result_type=CallOutcome)
        if not _newly_started(handle):
            await self._check_same_call(handle, tool_use)
        return handle

    async def _check_same_call(
        self, handle: WorkflowHandle[Any, Any], tool_use: ToolUseBlock
    ) -> None:
        """Attaching: the existing call must be this call (same tool, same input)."""
        started = await self._started_input(handle, CallInput)
        if started is not None:
            _refuse_other_calls([started.call], [tool_use])

    async def _started_input(self, handle: WorkflowHandle[Any, Any], kind: type[T]) -> T | None:
        """The input a workflow was started with (its first history event)."""
        async for event in handle.fetch_history_events(page_size=1):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            if not payloads:
                return None
            [first] = await self.client.data_converter.decode(payloads[:1], [kind])
            return cast(T, first)
        return None

    async def start_turn(
        self, tool_uses: Sequence[ToolUseBlock], session: Session,
        client_tools: Sequence[ToolDefinition] = (),
    ) -> TurnStart:
        """Start (or attach to) the batch workflow of one assistant message.

        Like `start`, an id already used for another call is refused
        (IdempotencyConflictError), whether that call came alone, in another
        batch, or in this same batch submitted before with other inputs. A call
        that already exists and is not this batch's own (submitted alone, or in
        another turn or batch) is attached, never started again: the turn
        workflow runs only the batch's own calls (`TurnStart`).
        """
        workflow_id = turn_workflow_id(session.session_id, turn_key(session, tool_uses))
        existing = await asyncio.gather(*(self._existing_call(session, t) for t in tool_uses))
        attached = {
            t.id: found.turn_id
            for t, found in zip(tool_uses, existing, strict=True)
            if found is not None and found.parent_id != workflow_id
        }
        own = [t for t in tool_uses if t.id not in attached]
        if not own:
            return TurnStart(handle=None, calls=[], attached=attached)
        named = {t.name for t in own}
        handle = await self._start_turn_workflow(
            workflow_id, own, session, [t for t in client_tools if t.name in named])
        if not _newly_started(handle):
            await self._check_same_turn(handle, own)
        return TurnStart(handle=handle, calls=own, attached=attached)

    async def _start_turn_workflow(
        self, workflow_id: str, tool_uses: Sequence[ToolUseBlock], session: Session,
        client_tools: Sequence[ToolDefinition] = (),
    ) -> WorkflowHandle[Any, TurnOutcome]:
        try:
            return await self.client.start_workflow(
                TURN_WORKFLOW,
                TurnInput(
                    calls=list(tool_uses),
                    session=session,
                    concurrency=self.settings.session_concurrency,
                    client_tools=list(client_tools),
                ),
                id=workflow_id,
                task_queue=self.task_queue,
                result_type=TurnOutcome,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                request_eager_start=self.eager_start,
            )
        except WorkflowAlreadyStartedError:
            return self.client.get_workflow_handle(workflow_id, result_type=TurnOutcome)

    async def _existing_call(
        self, session: Session, tool_use: ToolUseBlock
    ) -> _ExistingCall | None:
        """The call already under this id (it must be this call), or None."""
        handle = self.client.get_workflow_handle(
            call_workflow_id(session.session_id, tool_use.id)
        )
        try:
            async for event in handle.fetch_history_events(page_size=1):
                attrs = event.workflow_execution_started_event_attributes
                started = None
                if attrs.input.payloads:
                    [started] = await self.client.data_converter.decode(
                        attrs.input.payloads[:1], [CallInput]
                    )
                if isinstance(started, CallInput):
                    _refuse_other_calls([started.call], [tool_use])
                    turn = started.session.turn_id
                else:
                    turn = session.turn_id
                return _ExistingCall(turn, attrs.parent_workflow_execution.workflow_id)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
        return None

    async def _check_same_turn(
        self, handle: WorkflowHandle[Any, Any], tool_uses: Sequence[ToolUseBlock]
    ) -> None:
        """Attaching to a batch (same turn, same ids): every call must be the same call.

        Covers the window in which the turn has started but not yet its calls."""
        started = await self._started_input(handle, TurnInput)
        if started is not None:
            _refuse_other_calls(started.calls, tool_uses)

    # ------------------------------------------------- ToolDispatcher API
    async def dispatch(self, tool_use: ToolUseBlock, session: Session) -> ToolResultBlock:
        """Run one call to its end (parks until a human decides, if policy says so)."""
        return (await self.dispatch_outcome(tool_use, session)).result

    async def dispatch_outcome(self, tool_use: ToolUseBlock, session: Session) -> CallOutcome:
        handle = await self.start(tool_use, session)
        return await handle.result()

    async def dispatch_all(
        self, tool_uses: Sequence[ToolUseBlock], session: Session
    ) -> list[ToolResultBlock]:
        """One assistant message's calls, capped per session, results in input order."""
        if not tool_uses:
            return []
        if len(tool_uses) == 1:
            return [await self.dispatch(tool_uses[0], session)]
        start = await self.start_turn(tool_uses, session)
        results: dict[str, ToolResultBlock] = {}
        if start.handle is not None:
            outcome = await start.handle.result()
            results.update(zip((c.id for c in start.calls), outcome.results, strict=True))
        for tool_use_id in start.attached:  # first submitted elsewhere: its own outcome
            results[tool_use_id] = (await self.attach(session.session_id, tool_use_id)).result
        return [results[t.id] for t in tool_uses]

    def get_definitions_for_session(self, session: Session) -> list[ToolDefinition]:
        if self.registry is None:
            raise RuntimeError("DurableDispatcher was built without a registry")
        return self.registry.definitions_for(session)

    async def cancel_session_tools(
        self, session_id: str, cancellation: Cancellation | None = None
    ) -> int:
        """Cancel every running call (and batch) of the session; returns how many.
        `cancellation` (who, how, why) is recorded with each call it ends."""
        count = 0
        found = [e async for e in self.client.list_workflows(_running_in_session(session_id))]
        # Calls before turns: a turn's cancel reaches its calls without the
        # reason, and a call's first cancel request is the one it records.
        found.sort(key=lambda e: e.workflow_type == TURN_WORKFLOW)
        for execution in found:
            if execution.status != WorkflowExecutionStatus.RUNNING:
                continue
            if execution.workflow_type == SUBCALL_WORKFLOW:
                continue  # a composed call's wait: cancelling the call ends it
            if await self.end_if_wedged(execution.id, execution.run_id):
                count += 1
                continue
            handle = self.client.get_workflow_handle(execution.id, run_id=execution.run_id)
            try:
                await handle.cancel(reason=_reason(cancellation))
                count += 1
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
        return count

    async def end_wedged_in_session(self, session_id: str, skip: set[str]) -> int:
        """End the session's running calls and turns (workflow ids not in `skip`)
        whose workflow task cannot heal; returns how many. For callers that
        cancel from the store's rows: a call wedged before it was classified
        has no row."""
        count = 0
        async for execution in self.client.list_workflows(_running_in_session(session_id)):
            if execution.id in skip or execution.status != WorkflowExecutionStatus.RUNNING:
                continue
            if await self.end_if_wedged(execution.id, execution.run_id):
                count += 1
        return count

    async def resolve_confirmation(
        self,
        request_id: str,
        decision: str,
        reason: str | None = None,
        decided_by: str | None = None,
        *,
        edited_input: dict[str, Any] | None = None,
        via: str = "api",
    ) -> str:
        """Decide a parked call; returns the decision that stands (first write wins).

        Raises ValueError for an invalid decision or edit, KeyError (UnknownCallError)
        for an unknown request id — like the in-process dispatcher.
        """
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {list(DECISIONS)}, not {decision!r}")
        result = await self.decide(
            request_id,
            decision,
            reason=reason,
            decided_by=decided_by,
            via=via,
            edited_input=edited_input,
        )
        if result.winner is not None:
            return result.winner.decision
        raise ValueError(result.message)

    # ------------------------------------------------------ HTTP helpers
    def handle(self, session_id: str, tool_use_id: str) -> WorkflowHandle[Any, CallOutcome]:
        return self.client.get_workflow_handle(
            call_workflow_id(session_id, tool_use_id), result_type=CallOutcome
        )

    async def attach(self, session_id: str, tool_use_id: str) -> CallOutcome:
        """Wait for an existing call's outcome (an agent re-attaching after a restart)."""
        try:
            return await self.handle(session_id, tool_use_id).result()
        except RPCError as exc:
            raise _unknown(exc, session_id, tool_use_id) from exc

    async def status(self, session_id: str, tool_use_id: str) -> CallStatusView:
        """Where a call is now (works for running and finished calls)."""
        try:
            view: CallStatusView = await self.handle(session_id, tool_use_id).query(
                QUERY_STATUS, StatusRequest(), result_type=CallStatusView
            )
        except RPCError as exc:
            raise _unknown(exc, session_id, tool_use_id) from exc
        return self._with_link(view)

    def _with_link(self, view: CallStatusView) -> CallStatusView:
        """Add the approval link to a parked view: the workflow does not hold it
        (no token in history), so it is derived here, when read."""
        if view.status != CallStatus.PARKED or view.approval_url or view.request is None:
            return view
        url = approval_url(
            self.settings.public_base_url, self.settings.signing_secret(),
            view.request.request_id, view.expires_at,
        )
        return view.model_copy(update={"approval_url": url})

    async def cancel(self, session_id: str, tool_use_id: str,
                     cancellation: Cancellation | None = None) -> bool:
        """Cancel one call (parked: ends cancelled; running: tool stops);
        `cancellation` (who, how, why) is recorded with its end.

        Returns True when the call was ended here because its workflow task
        cannot heal (see `end_if_wedged`); False when cancellation was requested.
        """
        try:
            if await self.end_if_wedged(call_workflow_id(session_id, tool_use_id)):
                return True
            await self.handle(session_id, tool_use_id).cancel(reason=_reason(cancellation))
        except RPCError as exc:
            raise _unknown(exc, session_id, tool_use_id) from exc
        return False

    async def end_if_wedged(self, workflow_id: str, run_id: str | None = None) -> bool:
        """End a call whose workflow task failed for a reason retrying cannot fix.

        A cancel request reaches a workflow only through a workflow task that
        completes, so such a call would never see it: it is recorded as
        cancelled (with the reason) and terminated instead. One failed attempt
        is enough here, the caller asked for the end. Needs a store that can
        record it (`approvals` is the Repository in the API and the CLI).
        """
        if not stuck.can_end(self.approvals):
            return False
        trouble = await stuck.diagnose(self.client, workflow_id, run_id)
        if trouble is None or trouble.heals:
            return False
        await stuck.end_call(
            self.client, cast(stuck.FinalStore, self.approvals), trouble, cancelled=True
        )
        return True


def _refuse_other_calls(
    existing: Sequence[ToolUseBlock], submitted: Sequence[ToolUseBlock]
) -> None:
    """IdempotencyConflictError for the first submitted call whose id an existing
    call holds with another tool or input."""
    before = {c.id: (c.name, input_hash(c.name, c.input)) for c in existing}
    for tool_use in submitted:
        now = (tool_use.name, input_hash(tool_use.name, tool_use.input))
        held = before.get(tool_use.id)
        if held is not None and held != now:
            raise IdempotencyConflictError(tool_use.id, held, now)


def _newly_started(handle: WorkflowHandle[Any, Any]) -> bool:
    """True when start_workflow created the run (not attached to an existing one)."""
    resp = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(resp, "started", False))


def _running_in_session(session_id: str) -> str:
    """Visibility query: the session's running call and turn workflows."""
    prefixes = (session_call_prefix(session_id), turn_workflow_id(session_id, ""))
    query = " OR ".join(f'WorkflowId STARTS_WITH "{_quote(p)}"' for p in prefixes)
    return f"({query}) AND ExecutionStatus = 'Running'"


def _reason(cancellation: Cancellation | None) -> str:
    """The cancel request's reason ("" as before when nobody is named)."""
    return cancellation.encode() if cancellation is not None else ""


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _unknown(exc: RPCError, session_id: str, tool_use_id: str) -> Exception:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return UnknownCallError(f"no call {tool_use_id!r} in session {session_id!r}")
    return exc
