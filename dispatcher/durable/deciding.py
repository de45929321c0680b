"""The decision half of DurableDispatcher: find a request's call, send it a decision.

A decision goes to the call's workflow as the proven `decide` update; a
composed tool's sub-call is decided the same way, through the SubCallApproval
workflow that waits for it under the sub-call's own call id
(parkgate.durable.subcall_approvals). Refusals come back as data
(`DecideResult`), with the standing winner.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from temporalio.client import (
    Client,
    RPCTimeoutOrCancelledError,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from parkgate.approvals import proof
from parkgate.approvals.decisions import (
    DECISIONS,
    DecideInput,
    DecideKeywords,
    DecisionRecord,
    Rejection,
    RejectReason,
    already_decided,
    no_longer_waiting,
    reason_of,
)
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER, UnknownCallError
from parkgate.durable.client_plugin import proof_keys_of
from parkgate.durable.payloads import (
    QUERY_STATUS,
    UPDATE_DECIDE,
    CallOutcome,
    CallStatusView,
    DecideResult,
    StatusRequest,
    call_workflow_id,
)

if TYPE_CHECKING:
    pass


class ApprovalLookup(Protocol):
    """Finds which call an approval request belongs to (the Repository does)."""

    async def get_approval(self, request_id: str) -> ApprovalRecord | None: ...


class DecisionSending:
    """Mixin of DurableDispatcher: decide approval requests."""

    # Provided by DurableDispatcher.
    if TYPE_CHECKING:
        client: Client
        approvals: ApprovalLookup | None

        def handle(self, session_id: str, tool_use_id: str) -> WorkflowHandle[Any, CallOutcome]: ...
        async def status(self, session_id: str, tool_use_id: str) -> CallStatusView: ...

    async def locate(self, request_id: str) -> tuple[str, str]:
        """(session_id, tool_use_id) of an approval request, from the store."""
        record = await self._approval(request_id)
        return record.session_id, record.tool_use_id

    async def _approval(self, request_id: str) -> ApprovalRecord:
        record = await self.approvals.get_approval(request_id) if self.approvals else None
        if record is None:
            raise UnknownCallError(f"unknown confirmation request '{request_id}'")
        return record

    async def decide(
        self,
        request_id: str,
        decision: str,
        *,
        session_id: str | None = None,
        tool_use_id: str | None = None,
        wait: bool = True,
        **fields: Unpack[DecideKeywords],
    ) -> DecideResult:
        """`send_decision` with the decision given as DecideInput's fields
        (`DecideKeywords`; `via` defaults to "api"). TypeError for others."""
        unknown = set(fields) - set(DecideInput.model_fields)
        if unknown:
            raise TypeError(f"decide() got unexpected keyword arguments {sorted(unknown)}")
        inp = DecideInput.model_validate(
            {"via": "api", **fields, "request_id": request_id, "decision": decision}
        )
        return await self.send_decision(
            inp, session_id=session_id, tool_use_id=tool_use_id, wait=wait
        )

    async def send_decision(
        self,
        inp: DecideInput,
        *,
        session_id: str | None = None,
        tool_use_id: str | None = None,
        wait: bool = True,
    ) -> DecideResult:
        """Send a decision as the `decide` update; wait=False returns once the
        workflow accepted it (its validator ran), without waiting for it to be
        applied. (The `decide` signal is retired: workflows ignore it.)

        A rejected decision (already decided, unknown request, invalid edit)
        comes back as accepted=False with the message and the standing winner.
        `principal_id` / `claimed_name` / `approver` say who decides (see
        DecideInput); the caller has authenticated them. Without session_id and
        tool_use_id the call is found from the request id in the store.

        The decision goes out proven (parkgate.approvals.proof, kind "decide", bound to
        the call's workflow id) with this client's proof keys; a client
        without them sends it unproven, and the workflow refuses it
        (RejectReason.UNPROVEN).
        """
        request_id = inp.request_id
        if session_id is None or tool_use_id is None:
            record = await self._approval(request_id)
            session_id, tool_use_id = record.session_id, record.tool_use_id
        handle = self.handle(session_id, tool_use_id)
        inp = self.proven(inp, call_workflow_id(session_id, tool_use_id))
        await _parked_in_history(handle)
        try:
            if not wait:
                sent = await handle.start_update(UPDATE_DECIDE, inp, result_type=DecideResult,
                                                 wait_for_stage=WorkflowUpdateStage.ACCEPTED)
                # A refusal by the validator comes back completed at once (its
                # outcome known to the handle): raised here, answered below.
                if getattr(sent, "_known_outcome", None) is not None:
                    await sent.result()
                return DecideResult(accepted=True, message="decision accepted (not awaited)")
            return await handle.execute_update(UPDATE_DECIDE, inp, result_type=DecideResult)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(cause)
            reason = _rejected_reason(cause)
            winner = _rejected_winner(cause)
            if winner is not None:
                return DecideResult(accepted=False, winner=winner, message=message, reason=reason)
            try:
                winner = (await self.status(session_id, tool_use_id)).decision
            except _NO_ANSWER:
                # The winner is a courtesy: without a worker to answer the query
                # the caller still learns it lost (the store has the winner).
                pass
            return DecideResult(accepted=False, winner=winner, message=message, reason=reason)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            # Either no such call, or it already ended (expired, cancelled, ran).
            try:
                view = await _ended_status(handle)
            except UnknownCallError:
                raise
            except _NO_ANSWER:
                # A closed workflow answers a query only once a worker replayed
                # its whole history: without one (all busy, or dying) the store
                # has the winner (409, not 503).
                return await self._stored_refusal(request_id)
            return DecideResult.refused(_ended_refusal(view), view.decision)

    async def _stored_refusal(self, request_id: str) -> DecideResult:
        """The refusal of a decision for an ended call, from the stored request:
        the winner when a person decided it, else "no longer waiting"."""
        try:
            record = await self.approvals.get_approval(request_id) if self.approvals else None
        except Exception:  # the store is down too: the refusal stands without its winner
            record = None
        won = record.decision_record() if record is not None else None
        if won is None:
            return DecideResult.refused(no_longer_waiting("ended"), None)
        return DecideResult.refused(already_decided(won.decision, won.decided_by), won)

    def proven(self, inp: DecideInput, workflow_id: str) -> DecideInput:
        """`inp` with the proof that this API sent it to `workflow_id`."""
        keys = proof_keys_of(self.client)
        if keys is None:
            return inp.model_copy(update={"proof": None})
        return proof.prove(inp, proof.KIND_DECIDE, workflow_id, keys)


#: A status query that could not be answered (no call, or no answer).
_NO_ANSWER = (UnknownCallError, *TEMPORAL_NO_ANSWER)
#: How long a decision waits for its call's park to be in history: a parked
#: call with a live worker answers at once; this bounds a call still storing its
#: request, or a worker restarting (the update would wait for one anyway).
_SETTLE_SECONDS = 30.0
_SETTLE_POLL_SECONDS = 0.05
#: One status query's bound: with no worker alive it cannot be answered; it is
#: asked again until _SETTLE_SECONDS have passed.
_SETTLE_QUERY_SECONDS = 5.0


class ParkNotSettled(RPCTimeoutOrCancelledError):
    """The call's park is not known to be in history yet: no worker answered
    its status, or it still reports `queued`. The decision is not sent; the
    API answers 503 (retry shortly), like an update no worker accepted."""


async def _parked_in_history(handle: WorkflowHandle[Any, Any]) -> None:
    """Return once the workflow task that parked the call is committed.

    The parked row is stored by `create_approval` before its workflow hears
    that it finished, so a decision sent at once can reach Temporal in the
    same workflow task as that result. A worker that does not have the
    workflow cached then records the update after the park's commands, and
    any later replay answers it before them: non-determinism, and the call
    is wedged (docs/FAULTS.md, finding 11; an SDK ordering issue of updates
    handled on a cold start). A query is answered only once the workflow
    task in flight is done, so an answer past `queued` means the park is in
    history and the update lands in a task of its own.

    Strict: without that answer the decision is not sent (ParkNotSettled, or
    the query's own no-answer error; the API answers 503 and the person or
    agent retries). An update needs a live worker to be accepted anyway, so
    this refuses nothing that could have been applied safely. Only a call
    Temporal does not know (NOT_FOUND) goes on, to the update's own answer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _SETTLE_SECONDS
    cause: RPCError | None
    while True:
        left = deadline - loop.time()
        try:
            view: CallStatusView = await handle.query(
                QUERY_STATUS, StatusRequest(), result_type=CallStatusView,
                rpc_timeout=timedelta(seconds=max(0.5, min(_SETTLE_QUERY_SECONDS, left))),
            )
        except (RPCError, WorkflowQueryFailedError) as exc:
            if isinstance(exc, RPCError) and exc.status == RPCStatusCode.NOT_FOUND:
                return
            if await _closed(handle):
                # It ended: no park to wait for, and the update's NOT_FOUND
                # answers the decider (a query of a closed workflow needs a
                # worker to replay all of it, and may never come).
                return
            if isinstance(exc, WorkflowQueryFailedError):
                raise
            # A timeout (the core reports it with varying codes) or no server.
            why, cause = "no worker answered the call's status in time", exc
        else:
            if view.status != CallStatus.QUEUED:
                return
            why, cause = "the call is still storing its approval request", None
        if loop.time() >= deadline:
            raise ParkNotSettled(f"{why}; retry shortly") from cause
        await asyncio.sleep(_SETTLE_POLL_SECONDS)


async def _closed(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the call's workflow has ended (the server answers: no worker needed)."""
    try:
        desc = await handle.describe(rpc_timeout=timedelta(seconds=_SETTLE_QUERY_SECONDS))
    except RPCError:
        return False
    return desc.status is not None and desc.status != WorkflowExecutionStatus.RUNNING


async def _ended_status(handle: WorkflowHandle[Any, Any]) -> CallStatusView:
    """The status of a call whose workflow has ended, bounded like the settle query."""
    try:
        return await handle.query(
            QUERY_STATUS, StatusRequest(), result_type=CallStatusView,
            rpc_timeout=timedelta(seconds=_SETTLE_QUERY_SECONDS),
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise UnknownCallError(f"unknown call {handle.id}") from exc
        raise


def _ended_refusal(view: CallStatusView) -> Rejection:
    """Why a decision for a call whose workflow has ended is refused: a person
    decided it first ("already decided", as while it still runs), or it ended
    otherwise (expired, cancelled, never parked)."""
    won = view.decision
    if won is not None and won.decision in DECISIONS:
        return already_decided(won.decision, won.decided_by)
    return no_longer_waiting(view.status.value)


def _rejected_winner(cause: BaseException | None) -> DecisionRecord | None:
    """The standing winner the validator sent with its rejection, if any."""
    if not isinstance(cause, ApplicationError) or not cause.details:
        return None
    try:
        return DecisionRecord.model_validate(cause.details[0])
    except ValueError:
        return None


def _rejected_reason(cause: BaseException | None) -> RejectReason | None:
    """Why the validator refused (details[1]); None from workers before reasons."""
    if not isinstance(cause, ApplicationError) or len(cause.details) < 2:
        return None
    return reason_of(cause.details[1])
