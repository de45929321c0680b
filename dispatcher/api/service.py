"""The API's view of calls: start or attach, status, long-poll, decide, cancel.

Status comes from the history store (the call row, written by the workflow's
record activity) and, while the row is missing or not final, from the
workflow's `status` query, which also carries the approval URL. Finished
calls never need Temporal: the row holds the result.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from parkgate.api.approval_links import link_for
from parkgate.api.errors import ApiError
from parkgate.api.schemas import CallLinks, CallResource
from parkgate.decisions import RejectReason
from parkgate.durable import stuck
from parkgate.durable.client import TEMPORAL_NO_ANSWER, DurableDispatcher, UnknownCallError
from parkgate.durable.payloads import (
    CallStatusView,
    DecideInput,
    DecideResult,
    DecisionRecord,
    call_workflow_id,
)
from parkgate.models import Session, ToolUseBlock
from parkgate.records import CallStatus
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallRecord
from parkgate.worker_groups import WORKSPACE_ACTIVITIES


class CallService:
    """Everything the routers do with calls, in one place (over DurableDispatcher)."""

    def __init__(
        self, settings: Settings, repo: Repository, dispatcher: DurableDispatcher
    ) -> None:
        self.settings = settings
        self.repo = repo
        self.dispatcher = dispatcher
        self.temporal = dispatcher.client
        self.secret = settings.signing_secret()
        #: Set when the server starts shutting down: long-polls stop waiting and
        #: answer with the call's current state (202) instead of being cut off.
        self.draining = asyncio.Event()

    # ------------------------------------------------------------ starting
    async def start_call(self, call: ToolUseBlock, session: Session) -> WorkflowHandle[Any, Any]:
        """Start the call workflow, or attach to the one already running or finished."""
        return await self.dispatcher.start(call, session)

    async def start_turn(
        self, calls: list[ToolUseBlock], session: Session
    ) -> WorkflowHandle[Any, Any]:
        """Start (or attach to) the turn workflow of one assistant message."""
        return await self.dispatcher.start_turn(calls, session)

    # -------------------------------------------------------------- status
    def handle(self, session_id: str, tool_use_id: str) -> WorkflowHandle[Any, Any]:
        return self.dispatcher.handle(session_id, tool_use_id)

    async def query(self, session_id: str, tool_use_id: str) -> CallStatusView | None:
        """The workflow's own view, or None when there is no such workflow."""
        try:
            return await self.dispatcher.status(session_id, tool_use_id)
        except UnknownCallError:
            return None

    async def resource(
        self, session_id: str, tool_use_id: str, *, turn_id: str | None = None
    ) -> CallResource | None:
        """The call resource from the store row and, if needed, the workflow."""
        resource, _ = await self.resource_and_stored(session_id, tool_use_id, turn_id=turn_id)
        return resource

    async def resource_and_stored(
        self, session_id: str, tool_use_id: str, *, turn_id: str | None = None
    ) -> tuple[CallResource | None, bool]:
        """The call resource, and whether the store already holds its final row
        (read once: a long-poll must not answer `finished` before the store does)."""
        row = await self.repo.get_call(session_id, tool_use_id)
        stored = row is not None and row.status.terminal
        return await self._resource(session_id, tool_use_id, row, turn_id), stored

    async def _resource(
        self, session_id: str, tool_use_id: str, row: CallRecord | None, turn_id: str | None
    ) -> CallResource | None:
        view: CallStatusView | None = None
        if row is not None and row.status == CallStatus.PARKED:
            # Parked: the store has all we need (no worker round trip, so this
            # answers even while every worker is down).
            parked = await self._parked_from_store(row)
            if parked is not None and not await self._decided_not_stored(session_id, tool_use_id):
                return self._build(session_id, tool_use_id, row, parked, turn_id)
        problem: str | None = None
        if row is None or not row.status.terminal:
            try:
                view, problem = await self._query_unless_wedged(
                    session_id, tool_use_id, unclassified=row is None
                )
            except TEMPORAL_NO_ANSWER:
                # A workflow task that keeps failing answers no query: say so.
                problem = await self._task_problem(session_id, tool_use_id)
                if row is None and problem is None:
                    raise  # nothing to answer from: 503, retry
                # No worker (or no Temporal) answered: the stored row still
                # says where the call is, so answer from it.
                view = None
            if row is None and view is None and problem is None:
                return None
        resource = self._build(session_id, tool_use_id, row, view, turn_id)
        if problem is not None:
            resource = resource.model_copy(update={"problem": problem})
        if view is not None and view.worker_group and not resource.finished:
            waiting = await self._waiting_for(session_id, tool_use_id, view.worker_group)
            if waiting is not None:
                resource = resource.model_copy(update={"waiting_for": waiting})
        return resource

    async def _decided_not_stored(self, session_id: str, tool_use_id: str) -> bool:
        """Whether a call the store still shows parked was decided already.

        The decision's store write travels with the next committed write (the
        execute activity); for a worker group with no live worker that write
        waits as long as the group is down, so the store would go on showing the
        call parked. A scheduled workspace activity gives it away (a describe:
        no worker needed). Only asked when worker groups are configured.
        """
        if not self.settings.worker_groups:
            return False
        try:
            desc = await self.handle(session_id, tool_use_id).describe()
        except TEMPORAL_NO_ANSWER:
            return False
        return any(
            p.activity_type.name in WORKSPACE_ACTIVITIES
            for p in desc.raw_description.pending_activities
        )

    async def _waiting_for(self, session_id: str, tool_use_id: str, group: str) -> str | None:
        """'worker group <name>' while a workspace activity of the call is scheduled
        but no worker of the session's group has started it (none is live, or
        all are busy); None otherwise, or when Temporal does not answer."""
        try:
            desc = await self.handle(session_id, tool_use_id).describe()
        except TEMPORAL_NO_ANSWER:
            return None
        for pending in desc.raw_description.pending_activities:
            if (
                pending.activity_type.name in WORKSPACE_ACTIVITIES
                and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
            ):
                return f"worker group {group}"
        return None

    async def _query_unless_wedged(
        self, session_id: str, tool_use_id: str, *, unclassified: bool
    ) -> tuple[CallStatusView | None, str | None]:
        """The status query; for a call not classified yet (no row), raced with a
        look at its workflow task: a task that keeps failing would hold the
        query until Temporal's query timeout (30 s). A describe answers before
        the query's worker round trip, so a healthy call waits no longer.
        Returns (view, None) or, for such a task, (None, what is wrong)."""
        if not unclassified:
            return await self.query(session_id, tool_use_id), None
        query = asyncio.ensure_future(self.query(session_id, tool_use_id))
        try:
            problem = await self._task_problem(session_id, tool_use_id)
            if problem is not None:
                return None, problem
            return await query, None
        finally:
            query.cancel()  # no-op once done; its outcome is collected either way
            with contextlib.suppress(asyncio.CancelledError, *TEMPORAL_NO_ANSWER):
                await query

    async def _task_problem(self, session_id: str, tool_use_id: str) -> str | None:
        """What is wrong with the call's workflow task, when it keeps failing."""
        try:
            trouble = await stuck.diagnose(
                self.temporal, call_workflow_id(session_id, tool_use_id)
            )
        except TEMPORAL_NO_ANSWER:
            return None  # no such workflow, or no Temporal: the caller decides
        return trouble.describe() if trouble is not None else None

    async def _parked_from_store(self, row: CallRecord) -> CallStatusView | None:
        """A status view of a parked call rebuilt from its approval record.

        Approval tokens are deterministic (request id + expiry, signed), so the
        link is re-derived and checked against the stored token hash; on any
        mismatch the caller falls back to asking the workflow.
        """
        if not row.request_id:
            return None
        approval = await self.repo.get_approval(row.request_id)
        if approval is None or approval.decision is not None:
            return None
        if (approval.info or {}).get("approvers"):
            return None  # quorum votes live in the workflow: ask it
        url = link_for(self.settings, self.secret, approval)
        if url is None:
            return None
        return CallStatusView(
            workflow_id=row.workflow_id or "",
            session_id=row.session_id,
            tool_use_id=row.tool_use_id,
            tool_name=row.tool_name or approval.tool_name,
            status=CallStatus.PARKED,
            approval_url=url,
            requested_at=approval.requested_at,
            expires_at=approval.expires_at,
        )

    async def final_row_stored(self, session_id: str, tool_use_id: str) -> bool:
        """True once the store holds the call's final row. A workflow shows its
        outcome while it still records it (decision, events, row): until then
        a reader of the store would not find what a `finished` answer said."""
        row = await self.repo.get_call(session_id, tool_use_id)
        return row is not None and row.status.terminal

    async def wait(
        self, session_id: str, tool_use_id: str, seconds: float, *, turn_id: str | None = None
    ) -> CallResource | None:
        """Long-poll: return as soon as the call finishes, or after `seconds`.

        Finished means the workflow ended, or sooner: a worker in this process
        committed the call's final row (store/wakeups.py), one workflow task
        and one history round trip before Temporal reports the workflow closed.
        The answer is the same either way: a finished call is answered from its
        row, as a plain GET would answer it.
        """
        if seconds <= 0:
            return await self.resource(session_id, tool_use_id, turn_id=turn_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        handle = self.handle(session_id, tool_use_id)
        with self.repo.final_rows.watch(session_id, tool_use_id) as committed:
            # A row committed before the watch began wakes nobody: look once (an
            # auto-approved read is often stored before its start returns).
            if await self.final_row_stored(session_id, tool_use_id):
                committed.set()
            while True:
                woken = committed.is_set() or await self._wait_handle(
                    handle, max(0.0, deadline - loop.time()), also=committed
                )
                resource = await self.resource(session_id, tool_use_id, turn_id=turn_id)
                if not woken or (resource is not None and resource.finished):
                    break
                committed.clear()  # a hint only: the row is not final, wait on
        if resource is not None and not resource.finished:
            # The workflow finished but its final row may trail by a moment.
            resource = await self._settle(session_id, tool_use_id, resource, turn_id)
        return resource

    async def _settle(
        self, session_id: str, tool_use_id: str, resource: CallResource, turn_id: str | None
    ) -> CallResource:
        view = await self.query(session_id, tool_use_id)
        if view is not None and view.outcome is not None:
            row = await self.repo.get_call(session_id, tool_use_id)
            return self._build(session_id, tool_use_id, row, view, turn_id)
        return resource

    async def _wait_handle(
        self, handle: WorkflowHandle[Any, Any], seconds: float,
        *, also: asyncio.Event | None = None,
    ) -> bool:
        """Wait for the workflow's result, a drain, or `also`; True when `also`
        alone ended the wait."""
        if self.draining.is_set():
            return False
        result = asyncio.ensure_future(handle.result(follow_runs=True))
        drained = asyncio.ensure_future(self.draining.wait())
        waits = {result, drained}
        woken = asyncio.ensure_future(also.wait()) if also is not None else None
        if woken is not None:
            waits.add(woken)
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            return woken is not None and woken.done() and not (result.done() or drained.done())
        finally:
            for task in waits:
                task.cancel()
            with contextlib.suppress(
                asyncio.CancelledError, TimeoutError, WorkflowFailureError, RPCError
            ):
                await result

    async def wait_turn(self, handle: WorkflowHandle[Any, Any], seconds: float) -> None:
        if seconds > 0:
            await self._wait_handle(handle, seconds)

    # -------------------------------------------------------------- decide
    async def decide(self, session_id: str, tool_use_id: str, inp: DecideInput) -> DecideResult:
        """Send the `decide` update; a rejected one is answered with the winner."""
        try:
            return await self.dispatcher.decide(
                inp.request_id,
                inp.decision,
                reason=inp.reason,
                decided_by=inp.decided_by,
                via=inp.via,
                edited_input=inp.edited_input,
                session_id=session_id,
                tool_use_id=tool_use_id,
                principal_id=inp.principal_id,
                claimed_name=inp.claimed_name,
                self_approved=inp.self_approved,
                approver=inp.approver,
                remember=inp.remember,
            )
        except UnknownCallError:
            # The workflow is gone (finished): report what the store knows.
            return DecideResult(accepted=False, message="the call is no longer waiting",
                                reason=RejectReason.NOT_WAITING)

    # -------------------------------------------------------------- cancel
    async def cancel(self, session_id: str, tool_use_id: str) -> bool:
        """Request cancellation; False when the call had already finished."""
        handle = self.handle(session_id, tool_use_id)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ApiError(404, "not_found", "tool call not found") from exc
            raise
        if desc.status is not None and desc.status.name != "RUNNING":
            return False
        row = await self.repo.get_call(session_id, tool_use_id)
        if row is not None and row.status.terminal:
            # The final row is written before the workflow closes (it may still
            # be finishing its notices): the call has ended, nothing to cancel.
            return False
        try:
            if await self.dispatcher.end_if_wedged(desc.id, desc.run_id):
                return True
            await handle.cancel()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    # ------------------------------------------------------------- helpers
    def _build(
        self,
        session_id: str,
        tool_use_id: str,
        row: CallRecord | None,
        view: CallStatusView | None,
        turn_id: str | None,
    ) -> CallResource:
        base = f"/v1/sessions/{session_id}/tool-calls/{tool_use_id}"
        status = CallStatus.QUEUED
        data: dict[str, Any] = {}
        if row is not None:
            status = row.status
            data.update(
                turn_id=row.turn_id,
                tool_name=row.tool_name,
                side_effects=row.side_effects,
                request_id=row.request_id,
                rule=row.rule,
                decision=row.decision,
                decided_by=row.decided_by,
                via=row.via,
                principal_id=row.principal_id,
                claimed_name=row.claimed_name,
                self_approved=row.self_approved,
                reason=row.reason,
                error_class=row.error_class,
                result=row.result if row.status.terminal else None,
                created_at=row.created_at,
                started_at=row.started_at,
                finished_at=row.finished_at,
                duration_ms=row.duration_ms,
            )
        approval_url: str | None = None
        if view is not None:
            outcome = view.outcome
            if outcome is not None and (row is None or not row.status.terminal):
                status = outcome.status
                data["result"] = outcome.result
                data["error_class"] = outcome.error_class.value if outcome.error_class else None
            elif row is None or _rank(view.status) > _rank(status):
                status = view.status
            data.setdefault("tool_name", view.tool_name)
            data["tool_name"] = data.get("tool_name") or view.tool_name
            if view.request is not None:
                data["request_id"] = view.request.request_id
                data["side_effects"] = data.get("side_effects") or view.request.side_effects.value
                data["rule"] = data.get("rule") or view.request.rule
                if view.request.approvers:
                    data["approvers"] = view.request.approvers
                    data["quorum"] = view.request.quorum
                    data["votes"] = view.votes
            data["expires_at"] = view.expires_at
            if view.decision is not None:
                data.update(_decision_fields(view.decision))
            approval_url = view.approval_url
        finished = status.terminal
        return CallResource(
            tool_use_id=tool_use_id,
            session_id=session_id,
            status=status,
            finished=finished,
            approval_url=approval_url if status == CallStatus.PARKED else None,
            links=CallLinks(
                self=base,
                events=f"{base}/events",
                cancel=f"{base}/cancel",
                approval=approval_url if status == CallStatus.PARKED else None,
            ),
            **{"turn_id": turn_id, **{k: v for k, v in data.items() if v is not None}},
        )


_ORDER = [
    CallStatus.QUEUED,
    CallStatus.PARKED,
    CallStatus.RUNNING,
]


def _rank(status: CallStatus) -> int:
    """Progress order; terminal states rank above every live one."""
    return _ORDER.index(status) if status in _ORDER else len(_ORDER)


def _decision_fields(rec: DecisionRecord) -> dict[str, Any]:
    """The resource's decision fields, named and nullable as the call row's."""
    fields = rec.approval_fields()
    return {k: v for k, v in fields.items() if k not in ("request_id", "decided_at")}
