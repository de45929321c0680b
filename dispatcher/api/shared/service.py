"""The API's view of calls: start or attach, status, long-poll, decide, cancel.

The store is the truth of a call: its row (status, result, decision, timings,
rule, request id) and, while the call is live, its approval request (expiry,
named approvers, the link re-derived from the stored token hash) make the
resource through one mapping, `call_resource` (api.schemas). A finished or parked
call costs no Temporal round trip. The workflow is asked only for what the
store cannot know yet:

- a call with no row: not classified yet, or its workflow task is wedged
  (`problem`); no row and no workflow is no such call;
- a quorum request's votes, counted in the workflow until the decision is
  committed;
- for a running call, whether its workflow task keeps failing (`problem`: a
  describe, no worker round trip);
- with worker groups: `waiting_for` (a workspace activity no worker of the
  group has started), and a call decided while its group is down (its
  decision's store write waits for the group, the row still says parked).

Otherwise a decision accepted but not yet written shows the call parked until
the write commits, and `finished` means the final row is stored: a long-poll
never answers before the store does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from parkgate.api.shared.approval_links import link_for, named_approvers
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.schemas import CallLinks, CallResource, call_resource
from parkgate.approvals.decisions import DecideInput, DecisionRecord, RejectReason
from parkgate.calls.cancellation import Cancellation
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.durable import stuck
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER, UnknownCallError
from parkgate.durable.client_payloads import ClaimInput
from parkgate.durable.dispatcher import DurableDispatcher, TurnStart
from parkgate.durable.payloads import CallStatusView, DecideResult, call_workflow_id
from parkgate.models import Session, ToolDefinition, ToolUseBlock
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallRecord
from parkgate.workspaces.worker_groups import WORKSPACE_ACTIVITIES

#: A claiming long-poll waits this long for this process's worker to wake it
#: before it also asks Temporal for the workflow's end.
IN_PROCESS_GRACE_SECONDS = 0.5

#: A long-poll re-reads a live call this often (a release in another process
#: wakes nobody here).
RELEASE_POLL_SECONDS = 2.0


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
    async def start_call(
        self, call: ToolUseBlock, session: Session, client_tools: Sequence[ToolDefinition] = (),
        claim: ClaimInput | None = None,
    ) -> WorkflowHandle[Any, Any]:
        """Start the call workflow, or attach to the one already running or finished
        (`claim`: the submitter's, taken at the release; see client_calls)."""
        return await self.dispatcher.start(call, session, client_tools, claim=claim)

    async def start_turn(
        self, calls: list[ToolUseBlock], session: Session,
        client_tools: Sequence[ToolDefinition] = (),
    ) -> TurnStart:
        """Start (or attach to) the turn workflow of one assistant message; calls
        submitted before, alone or in another turn, are attached, never re-run."""
        return await self.dispatcher.start_turn(calls, session, client_tools)

    # -------------------------------------------------------------- status
    def handle(self, session_id: str, tool_use_id: str) -> WorkflowHandle[Any, Any]:
        return self.dispatcher.handle(session_id, tool_use_id)

    async def query(self, session_id: str, tool_use_id: str) -> CallStatusView | None:
        """The workflow's own view, or None when there is no such workflow."""
        try:
            return await self.dispatcher.status(session_id, tool_use_id)
        except UnknownCallError:
            return None

    async def with_release(self, resource: CallResource) -> CallResource:
        """A released (or claimed) call's input as released, its hash and its claim:
        only its workflow knows them (the store keeps the input redacted)."""
        try:
            view = await self.query(resource.session_id, resource.tool_use_id)
        except TEMPORAL_NO_ANSWER:
            return resource
        if view is None or view.release is None:
            return resource
        release = view.release
        update: dict[str, Any] = {"input": release.input, "input_sha256": release.input_sha256,
                                  "released_at": release.released_at}
        if release.claim is not None:
            update.update(claimed_by=release.claim.claimed_by,
                          claimed_at=release.claim.claimed_at,
                          lease_expires_at=release.claim.lease_expires_at)
        return resource.model_copy(update=update)

    async def resource(
        self, session_id: str, tool_use_id: str, *, turn_id: str | None = None
    ) -> CallResource | None:
        """The call as the store has it, plus what only its workflow knows.

        A finished call is its row (no Temporal round trip); a live one its row
        and approval request, the workflow asked only for quorum votes and, with
        worker groups, work waiting for a group (see the module docstring).
        """
        row = await self.repo.get_call(session_id, tool_use_id)
        if row is None:
            resource = await self._unstored(session_id, tool_use_id, turn_id)
            if resource is None or resource.status == CallStatus.QUEUED:
                return resource
            # The workflow moved on while it was asked (a worker round trip,
            # slow under load): it reports a state only once that state's row
            # is committed, so the row is there now and answers instead (a
            # `parked` read without its row would lack the approval link).
            row = await self.repo.get_call(session_id, tool_use_id)
            if row is None:
                return resource
        if row.status.terminal:
            return call_resource(row, turn_id=turn_id)
        approval = await self.repo.get_approval(row.request_id) if row.request_id else None
        resource = call_resource(
            row, approval=approval, approval_url=self._live_link(approval), turn_id=turn_id
        )
        return await self._with_workflow_only(row, approval, resource)

    def _live_link(self, approval: ApprovalRecord | None) -> str | None:
        """The link of an undecided request, re-derived (the store keeps only the
        token's hash); None when it does not match the stored hash."""
        if approval is None or approval.decision is not None:
            return None
        return link_for(self.settings, self.secret, approval)

    async def _with_workflow_only(
        self, row: CallRecord, approval: ApprovalRecord | None, resource: CallResource
    ) -> CallResource:
        """A live call's resource with what the store cannot know yet.

        Quorum votes live in the workflow until the decision is committed. With
        worker groups, the decision's store write travels with the execute
        activity on the group's queue: while no worker of the group is live the
        store goes on showing a decided call parked, and a scheduled workspace
        activity (a describe: no worker needed) gives it away.
        """
        sid, tid = row.session_id, row.tool_use_id
        if row.status in (CallStatus.RELEASED, CallStatus.CLAIMED):
            return await self.with_release(resource)
        if row.status == CallStatus.RUNNING:
            # A running call whose workflow task keeps failing would otherwise
            # show `running` forever: say what is wrong (a describe, no worker).
            problem = await self._task_problem(sid, tid)
            if problem is not None:
                resource = resource.model_copy(update={"problem": problem})
        parked = row.status == CallStatus.PARKED
        work = await self._workspace_work(sid, tid) if self.settings.worker_groups else []
        quorum = parked and approval is not None and bool(named_approvers(approval))
        decided = parked and bool(work)
        if quorum or decided:
            resource = await self._as_workflow_says(
                sid, tid, resource, quorum=quorum, decided=decided
            )
        return await self._with_waiting_for(sid, resource, work)

    async def _as_workflow_says(
        self, session_id: str, tool_use_id: str, resource: CallResource,
        *, quorum: bool, decided: bool,
    ) -> CallResource:
        """A parked call's quorum votes, and for one decided before the store
        knows it, the workflow's status and decision (never a finished one: that
        comes from the final row) without a live link."""
        update: dict[str, Any] = {}
        try:
            view = await self.query(session_id, tool_use_id)
        except TEMPORAL_NO_ANSWER:
            view = None
            update["problem"] = await self._task_problem(session_id, tool_use_id)
        if view is not None and quorum:
            update["votes"] = view.votes
        if decided and (view is None or view.status != CallStatus.PARKED):
            update["approval_url"] = None
            update["links"] = resource.links.model_copy(update={"approval": None})
            if view is not None and not view.status.terminal:
                update["status"] = view.status
            if view is not None and view.decision is not None:
                update.update(_decision_fields(view.decision))
        return resource.model_copy(update=update)

    async def _unstored(
        self, session_id: str, tool_use_id: str, turn_id: str | None
    ) -> CallResource | None:
        """A call the store has no row for yet: queued (or wedged: `problem`),
        as its workflow says; None when there is no such workflow either."""
        try:
            view, problem = await self._query_unless_wedged(session_id, tool_use_id)
        except TEMPORAL_NO_ANSWER:
            # A workflow task that keeps failing answers no query: say so.
            problem = await self._task_problem(session_id, tool_use_id)
            if problem is None:
                raise  # nothing to answer from: 503, retry
            view = None
        if view is None and problem is None:
            return None
        resource = _unstored_resource(session_id, tool_use_id, view, turn_id)
        if problem is not None:
            resource = resource.model_copy(update={"problem": problem})
        if view is not None and view.worker_group:
            work = await self._workspace_work(session_id, tool_use_id)
            resource = await self._with_waiting_for(
                session_id, resource, work, group=view.worker_group
            )
        return resource

    async def _workspace_work(
        self, session_id: str, tool_use_id: str
    ) -> list[PendingActivityInfo]:
        """The call's workspace activities Temporal holds (scheduled or started);
        a describe, so no worker is needed; none when Temporal does not answer."""
        try:
            desc = await self.handle(session_id, tool_use_id).describe()
        except TEMPORAL_NO_ANSWER:
            return []
        return [
            p for p in desc.raw_description.pending_activities
            if p.activity_type.name in WORKSPACE_ACTIVITIES
        ]

    async def _with_waiting_for(
        self, session_id: str, resource: CallResource, work: list[PendingActivityInfo],
        *, group: str | None = None,
    ) -> CallResource:
        """'worker group <name>' while a workspace activity of the call is scheduled
        but no worker of the session's group has started it (none is live, or
        all are busy)."""
        if not any(p.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
                   for p in work):
            return resource
        if group is None:
            session = await self.repo.get_session(session_id)
            group = session.worker_group if session is not None else None
        if group is None:
            return resource
        return resource.model_copy(update={"waiting_for": f"worker group {group}"})

    async def _query_unless_wedged(
        self, session_id: str, tool_use_id: str
    ) -> tuple[CallStatusView | None, str | None]:
        """The status query of a call not classified yet, raced with a look at its
        workflow task: a task that keeps failing would hold the query until
        Temporal's query timeout (30 s). A describe answers before the query's
        worker round trip, so a healthy call waits no longer.
        Returns (view, None) or, for such a task, (None, what is wrong)."""
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

    async def wait(
        self, session_id: str, tool_use_id: str, seconds: float, *, turn_id: str | None = None,
        claiming: bool = False, classified: bool = False,
    ) -> CallResource | None:
        """Long-poll: return as soon as the call finishes, or after `seconds`.

        Finished means the workflow ended, or sooner: a worker in this process
        committed the call's final row (store/wakeups.py), one workflow task
        and one history round trip before Temporal reports the workflow closed.
        The answer is the same either way: a finished call is answered from its
        row, as a plain GET would answer it.

        `claiming` (a submit that claims, see client_calls): a claimed call is
        an answer too, and a released or claimed one is answered from its row
        alone (the caller adds the claim; no status query). `classified`: any
        status but queued is an answer (policy's verdict, parked included).
        """
        if seconds <= 0:
            return await self._answer(session_id, tool_use_id, turn_id, claiming)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        handle = self.handle(session_id, tool_use_id)
        with self.repo.final_rows.watch(session_id, tool_use_id) as committed:
            # A row committed before the watch began wakes nobody: look once (an
            # auto-approved read is often stored before its start returns); a
            # final row is the whole answer, read once.
            row = await self.repo.get_call(session_id, tool_use_id)
            if row is not None and row.status.terminal:
                return call_resource(row, turn_id=turn_id)
            while True:
                # A released client call is an answer too, but its workflow goes
                # on: without a wake-up from this process, look again now and then.
                left = max(0.0, deadline - loop.time())
                step = min(left, RELEASE_POLL_SECONDS)
                started = loop.time()
                woken = committed.is_set() or await self._wait_handle(
                    handle, step, also=committed,
                    # A worker in this process (eager start) writes the rows a
                    # claiming submit answers on: it wakes us first, mostly.
                    defer=IN_PROCESS_GRACE_SECONDS if claiming and self.dispatcher.eager_start
                    else 0.0,
                )
                # Not woken, and back before its step: the workflow ended (or a drain).
                early = not woken and loop.time() - started < step * 0.9
                resource = await self._answer(session_id, tool_use_id, turn_id, claiming)
                if resource is not None and (
                    resource.status.answerable
                    or (claiming and resource.status == CallStatus.CLAIMED)
                    or (classified and resource.status != CallStatus.QUEUED)
                ):
                    break
                if not woken and (early or left <= step or self.draining.is_set()):
                    break
                committed.clear()  # a hint only: the row is not final, wait on
        return resource

    async def _answer(self, session_id: str, tool_use_id: str, turn_id: str | None,
                      claiming: bool) -> CallResource | None:
        """The long-poll's look at the call: `resource`, or for a claiming submit
        a released or claimed call's row as it is."""
        if claiming:
            row = await self.repo.get_call(session_id, tool_use_id)
            if row is not None and row.status in (CallStatus.RELEASED, CallStatus.CLAIMED):
                return call_resource(row, turn_id=turn_id)
        return await self.resource(session_id, tool_use_id, turn_id=turn_id)

    async def _wait_handle(
        self, handle: WorkflowHandle[Any, Any], seconds: float,
        *, also: asyncio.Event | None = None, defer: float = 0.0,
    ) -> bool:
        """Wait for the workflow's result, a drain, or `also`; True when `also`
        alone ended the wait. `defer`: wait that long for `also` alone before
        asking Temporal (a history long-poll per wait costs both sides CPU)."""
        if self.draining.is_set():
            return False
        if also is not None and defer > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(also.wait(), min(defer, seconds))
                return True
            seconds -= min(defer, seconds)
            if seconds <= 0 or self.draining.is_set():
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

    async def wait_turn(self, session_id: str, start: TurnStart, seconds: float) -> None:
        """Long-poll a batch: its turn workflow and the calls it attached to."""
        if seconds <= 0:
            return
        handles = [self.handle(session_id, tool_use_id) for tool_use_id in start.attached]
        if start.handle is not None:
            handles.append(start.handle)
        await asyncio.gather(*(self._wait_handle(h, seconds) for h in handles))

    # -------------------------------------------------------------- decide
    async def decide(self, session_id: str, tool_use_id: str, inp: DecideInput) -> DecideResult:
        """Send the `decide` update; a rejected one is answered with the winner."""
        try:
            return await self.dispatcher.send_decision(
                inp, session_id=session_id, tool_use_id=tool_use_id
            )
        except UnknownCallError:
            # The workflow is gone (finished): report what the store knows.
            return DecideResult(accepted=False, message="the call is no longer waiting",
                                reason=RejectReason.NOT_WAITING)

    # -------------------------------------------------------------- cancel
    async def cancel(self, session_id: str, tool_use_id: str,
                     cancellation: Cancellation | None = None) -> bool:
        """Request cancellation; False when the call had already finished.
        `cancellation` (who, how, why) rides on the request: the call's final
        row and tool.failed event name it. Of two cancels of one call the
        first request's stands (Temporal keeps one request; a second is a no-op)."""
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
            await handle.cancel(reason=cancellation.encode() if cancellation else "")
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

def _unstored_resource(
    session_id: str, tool_use_id: str, view: CallStatusView | None, turn_id: str | None
) -> CallResource:
    """A call with no row yet, as its workflow says (queued without one). It
    is never `finished`: a call ends for readers when its final row is stored,
    and one that ended before its first row is shown running until then."""
    status = CallStatus.QUEUED if view is None else view.status
    data: dict[str, Any] = {}
    if view is not None:
        data["tool_name"] = view.tool_name
        if view.request is not None:
            data.update(request_id=view.request.request_id, rule=view.request.rule,
                        side_effects=view.request.side_effects.value)
    return CallResource(
        tool_use_id=tool_use_id,
        session_id=session_id,
        turn_id=turn_id,
        status=CallStatus.RUNNING if status.terminal else status,
        links=CallLinks.of(session_id, tool_use_id),
        **data,
    )


def _decision_fields(rec: DecisionRecord) -> dict[str, Any]:
    """The resource's decision fields, named and nullable as the call row's."""
    fields = rec.approval_fields()
    return {k: v for k, v in fields.items() if k not in ("request_id", "decided_at")}
