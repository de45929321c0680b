"""Client-executed calls on the API side: claim and outcome (the released view
is `CallService.with_release`).

Claims and outcomes are workflow updates (`claim`, `report_outcome`): the
API answers only after the workflow accepted them, and after the store write
the answer speaks of committed (the update handlers await it). A report that
comes after the call ended `outcome_unknown` is recorded by a
parkgate.LateOutcome workflow, visibly late. Refusals map to 4xx here.

A claim is a reservation (`claim_id`) that its holder starts (`start`) before
it runs the tool: a client that died before it received its claim never
started it, so the same key takes it over on its return, and anyone else
once it lapsed (`client_reserve_seconds`).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.schemas import CallResource
from parkgate.approvals import proof
from parkgate.calls.events import make_event_id
from parkgate.calls.records import CallRef, CallStatus
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER
from parkgate.durable.client_payloads import (
    CLIENT_REJECTED_ERROR_TYPE,
    KIND_START,
    LATE_OUTCOME_WORKFLOW,
    UNCLAIMED_TEXT,
    UPDATE_CLAIM,
    UPDATE_OUTCOME,
    UPDATE_START,
    ClaimInput,
    ClaimResult,
    ClientReject,
    LateOutcomeInput,
    LateOutcomeResult,
    OutcomeInput,
    OutcomeResult,
    StartInput,
    late_workflow_id,
)
from parkgate.durable.client_plugin import proof_keys_of
from parkgate.durable.payloads import call_workflow_id
from parkgate.models import Session, ToolDefinition, ToolUseBlock, is_input_sha256

if TYPE_CHECKING:
    from parkgate.api.shared.service import CallService
    from parkgate.settings import Settings
    from parkgate.store.results import EventRecord

M = TypeVar("M", ClaimInput, OutcomeInput, StartInput)
R = TypeVar("R", ClaimResult, OutcomeResult)
C = TypeVar("C", ClaimInput, StartInput)

#: Temporal statuses of an update worth sending again (load shed, task dropped).
_RETRIED = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.ABORTED, RPCStatusCode.UNAVAILABLE)
_RETRY_SECONDS = 20.0

#: Final statuses a report is still recorded beside (late): the lease ended,
#: or the call was cancelled while its claimer ran it.
_LATE_STATUSES = (CallStatus.OUTCOME_UNKNOWN.value, CallStatus.CANCELLED.value)
#: How long a report refused by a call being cancelled waits for its end.
_CANCEL_SETTLE_SECONDS = 10.0

#: HTTP status of each refusal.
_STATUS = {
    ClientReject.ALREADY_CLAIMED: 409,
    ClientReject.REPORT_CONFLICT: 409,
    ClientReject.NOT_RELEASED: 409,
    ClientReject.NOT_CLAIMED: 409,
    ClientReject.ENDED: 409,
    ClientReject.HASH_MISMATCH: 422,
    ClientReject.INVALID: 422,
    ClientReject.UNPROVEN: 503,
}


async def start_claiming(service: CallService, call: ToolUseBlock, session: Session,
                         client_tools: Sequence[ToolDefinition], inp: ClaimInput) -> bool:
    """Start the call carrying its submitter's claim, which the workflow takes in
    the release's own store write when policy releases the call at once (no
    claim update, no second write). True when this request started the call:
    only then can a claim taken at the release be this request's."""
    workflow_id = call_workflow_id(session.session_id, call.id)
    keys = proof_keys_of(service.temporal)
    # Without payload keys nothing is proven: the workflow would ignore it.
    claim = proof.prove(inp, proof.KIND_CLAIM_AT_RELEASE, workflow_id, keys) \
        if keys is not None else None
    handle = await service.start_call(call, session, client_tools, claim=claim)
    return claim is not None and _newly_started(handle)


def _newly_started(handle: WorkflowHandle[Any, Any]) -> bool:
    """The start created the run (the SDK keeps the start's answer on the handle;
    an attach to a running or closed call says `started: false`)."""
    resp = getattr(handle, "_start_workflow_response", None)
    return bool(getattr(resp, "started", False))


def claim_input(settings: Settings, key_id: str, key_name: str | None,
                lease_seconds: float) -> ClaimInput:
    """A claim for one request: a fresh reservation id, the settings' window."""
    return ClaimInput(claimed_by=f"key:{key_id}", claimed_by_name=key_name,
                      lease_seconds=lease_seconds, claim_id=uuid.uuid4().hex,
                      reserve_seconds=settings.client_reserve_seconds)


#: Whether the request a claim would be for is gone (the client disconnected).
Gone = Callable[[], Awaitable[bool]]


async def claimed_for_submitter(service: CallService, resource: CallResource,
                                call: ToolUseBlock, inp: ClaimInput, *,
                                started: bool, gone: Gone | None = None) -> CallResource:
    """A claiming submit's answer (`service.wait(..., claiming=True)`): a call
    claimed at its release for this request, or a released one claimed now
    (the `claim` update), or an unstarted reservation of this key taken over
    (a restarted client), with the claim, `claim_id` and `claim_won`;
    otherwise as is. Nothing is claimed for a request that is `gone`."""
    sid, tid = resource.session_id, resource.tool_use_id
    if resource.status not in (CallStatus.RELEASED, CallStatus.CLAIMED):
        return resource
    event = await _claimed_at_release(service, sid, tid, inp) \
        if started and resource.status == CallStatus.CLAIMED else None
    if event is None:
        if gone is not None and await gone():
            return resource  # nobody would receive the claim
        try:
            won = await claim(service, sid, tid, inp)
        except ApiError:
            fresh = await service.resource(sid, tid, turn_id=resource.turn_id) or resource
            if fresh.status == CallStatus.CLAIMED:
                return await service.with_release(fresh)  # someone else's: as a GET shows it
            return fresh
        return resource.model_copy(update={
            "status": CallStatus.CLAIMED, "input": won.input, "input_sha256": won.input_sha256,
            "claimed_by": won.claimed_by, "claimed_at": won.claimed_at,
            "lease_expires_at": won.lease_expires_at, "claim_won": True,
            "claim_id": won.claim_id})
    data = event.data or {}
    sha = data.get("input_sha256")
    # Either form: a worker of the version before RFC 8785 released it.
    if not isinstance(sha, str) or not is_input_sha256(sha, call.input):
        # A before-hook rewrote the input: the workflow has the input as released.
        return (await service.with_release(resource)).model_copy(
            update={"claim_won": True, "claim_id": inp.claim_id})
    # Released as submitted: the claim's event says all (no status query).
    return resource.model_copy(update={
        "input": call.input, "input_sha256": sha, "released_at": event.at,
        "claimed_by": data.get("claimed_by"), "claimed_at": event.at,
        "lease_expires_at": datetime.fromisoformat(str(data.get("lease_expires_at"))),
        "claim_won": True, "claim_id": inp.claim_id})


async def _claimed_at_release(service: CallService, session_id: str,
                              tool_use_id: str, inp: ClaimInput) -> EventRecord | None:
    """The call's tool.claimed event when its claim was taken at the release
    (by the request that started it: see start_claiming) with this claim."""
    event = await service.repo.get_event(make_event_id(session_id, tool_use_id, "tool.claimed"))
    data = event.data or {} if event is not None else {}
    if event is None or not data.get("at_release"):
        return None
    if data.get("claim_id") not in (None, inp.claim_id):
        return None  # a reservation this request did not make
    return event


async def start(service: CallService, session_id: str, tool_use_id: str,
                inp: StartInput) -> ClaimResult:
    """Send `start_claim`: the reservation's holder runs the call now (its lease
    begins); 409 when it lapsed or was taken over (then it must not run)."""
    return await _claim_update(service, session_id, tool_use_id, inp, KIND_START, UPDATE_START)


def lease_for(requested: float | None, default: float, maximum: float) -> float:
    """The lease a claim gets: asked for (capped by the maximum) or the default."""
    return min(requested if requested is not None else default, maximum)


async def claim(service: CallService, session_id: str, tool_use_id: str,
                inp: ClaimInput) -> ClaimResult:
    """Send `claim`; 409 (naming who claimed and when) when another won."""
    return await _claim_update(service, session_id, tool_use_id, inp, proof.KIND_CLAIM,
                               UPDATE_CLAIM)


async def _claim_update(service: CallService, session_id: str, tool_use_id: str,
                        inp: C, kind: str, update: str) -> ClaimResult:
    """Send a claim's update (`claim`, `start_claim`), proven for its kind; the
    workflow's refusal as its 4xx, a closed call as `_closed` says it."""
    handle = service.handle(session_id, tool_use_id)
    inp = _proven(service, inp, kind, call_workflow_id(session_id, tool_use_id))
    try:
        return await _update(handle, update, inp, ClaimResult)
    except WorkflowUpdateFailedError as exc:
        raise _refusal(exc) from None
    except RPCError as exc:
        raise await _closed(service, session_id, tool_use_id, exc) from None


async def report(service: CallService, session_id: str, tool_use_id: str,
                 inp: OutcomeInput) -> OutcomeResult:
    """Send `report_outcome`; a call already ended outcome_unknown records it late."""
    handle = service.handle(session_id, tool_use_id)
    inp = _proven(service, inp, proof.KIND_OUTCOME, call_workflow_id(session_id, tool_use_id))
    try:
        return await _reported(service, handle, session_id, tool_use_id, inp)
    except WorkflowUpdateFailedError as exc:
        refusal = _refusal(exc)
        if refusal.code != ClientReject.ENDED.value or _status_of(exc) not in _LATE_STATUSES:
            raise refusal from None
        if _status_of(exc) == CallStatus.CANCELLED.value:
            await service.wait(session_id, tool_use_id, _CANCEL_SETTLE_SECONDS)
    except RPCError as exc:
        error = await _closed(service, session_id, tool_use_id, exc)
        row = await service.repo.get_call(session_id, tool_use_id)
        if row is not None and row.status in (CallStatus.SUCCEEDED, CallStatus.FAILED):
            # Closed with a report: the same report again gets the same answer.
            view = await service.query(session_id, tool_use_id)
            stood = view.release.report if view is not None and view.release else None
            if stood is not None and stood.same_report(inp):
                return OutcomeResult(status=row.status, result=row.result,
                                     message="outcome recorded")
            if stood is not None:
                raise ApiError(409, ClientReject.REPORT_CONFLICT.value,
                               "another outcome was reported first") from None
        if row is None or row.status.value not in _LATE_STATUSES:
            raise error from None
    return await _late(service, session_id, tool_use_id, inp)


async def _reported(service: CallService, handle: WorkflowHandle[Any, Any], session_id: str,
                    tool_use_id: str, inp: OutcomeInput) -> OutcomeResult:
    """The `report_outcome` update's answer, or sooner the same answer from the
    store: when a worker in this process commits the call's final row for this
    very report (its `report_sha256` on tool.outcome_reported), the report is
    accepted (the write runs only once the workflow task that accepted it is
    committed) and recorded; the update completes on its own a workflow task
    later."""
    with service.repo.final_rows.watch(session_id, tool_use_id) as committed:
        update = asyncio.ensure_future(_update(handle, UPDATE_OUTCOME, inp, OutcomeResult))
        try:
            while True:
                woken = asyncio.ensure_future(committed.wait())
                await asyncio.wait({update, woken}, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if update.done():
                    return update.result()
                committed.clear()
                stored = await _stored_report(service, session_id, tool_use_id, inp)
                if stored is not None:
                    return stored
        finally:
            if not update.done():
                update.add_done_callback(_retrieved)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """An update answered from the store finishes unobserved: take its outcome."""
    if not task.cancelled():
        task.exception()


async def _stored_report(service: CallService, session_id: str, tool_use_id: str,
                         inp: OutcomeInput) -> OutcomeResult | None:
    """The answer to `inp` from the store, when its final row holds this report."""
    row = await service.repo.get_call(session_id, tool_use_id)
    if row is None or row.status not in (CallStatus.SUCCEEDED, CallStatus.FAILED) \
            or row.result is None:
        return None
    event = await service.repo.get_event(
        make_event_id(session_id, tool_use_id, "tool.outcome_reported"))
    if event is None or (event.data or {}).get("report_sha256") != inp.report_sha256():
        return None
    return OutcomeResult(status=row.status, result=row.result, message="outcome recorded")


async def _update(handle: WorkflowHandle[Any, Any], name: str, inp: BaseModel,
                  result_type: type[R]) -> R:
    """Send one update; retried under one update id (Temporal answers a repeat of
    the same id with the first one's outcome) while the server sheds load: a
    workflow takes a bounded number of updates in flight (many clients claiming
    at once), and an update whose workflow task was dropped is aborted."""
    update_id = f"{name}-{uuid.uuid4().hex}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _RETRY_SECONDS
    delay = 0.05
    while True:
        try:
            return await handle.execute_update(name, inp, id=update_id, result_type=result_type)
        except RPCError as exc:
            if exc.status not in _RETRIED or loop.time() + delay > deadline:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 1.0)


def _proven(service: CallService, inp: M, kind: str, workflow_id: str) -> M:
    """`inp` with the proof that this API sent it to `workflow_id` (issue 28);
    unproven without payload keys (the workflow then refuses it: 503)."""
    keys = proof_keys_of(service.temporal)
    if keys is None:
        return inp
    return proof.prove(inp, kind, workflow_id, keys)


async def _late(service: CallService, session_id: str, tool_use_id: str,
                inp: OutcomeInput) -> OutcomeResult:
    """Record a report that came after the lease ended, or after the call was
    cancelled while claimed (its claimer ran it): the first one stands."""
    row = await service.repo.get_call(session_id, tool_use_id)
    if row is None or row.status.value not in _LATE_STATUSES:
        raise ApiError(409, ClientReject.ENDED.value, "the call is not outcome_unknown")
    if row.status == CallStatus.CANCELLED and await service.repo.get_event(
            make_event_id(session_id, tool_use_id, "tool.claimed")) is None:
        raise ApiError(409, ClientReject.ENDED.value,
                       "the call was cancelled before anyone claimed it",
                       {"status": row.status.value})
    released = await _released_sha256(service, session_id, tool_use_id, inp.input_sha256)
    if released is not None and released != inp.input_sha256:
        raise ApiError(422, ClientReject.HASH_MISMATCH.value,
                       "the reported input_sha256 is not the released input's",
                       {"input_sha256": released})
    ref = CallRef(session_id=session_id, tool_use_id=tool_use_id, turn_id=row.turn_id,
                  tool_name=row.tool_name)
    late_id = late_workflow_id(session_id, tool_use_id)
    inp = _proven(service, inp, proof.KIND_OUTCOME, late_id)
    try:
        handle = await service.temporal.start_workflow(
            LATE_OUTCOME_WORKFLOW,
            LateOutcomeInput(ref=ref, report=inp, side_effects=row.side_effects,
                             status=None if row.status == CallStatus.OUTCOME_UNKNOWN
                             else row.status),
            id=late_id, task_queue=service.dispatcher.task_queue,
            result_type=LateOutcomeResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            # A refused (failed) run leaves the id to a proven report.
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
        )
    except WorkflowAlreadyStartedError:
        handle = service.temporal.get_workflow_handle(late_id, result_type=LateOutcomeResult)
    try:
        done: LateOutcomeResult = await handle.result()
    except WorkflowFailureError as exc:  # its report carried no valid proof
        raise ApiError(503, ClientReject.UNPROVEN.value,
                       f"the late outcome was refused: {exc.cause}") from None
    if not done.report.same_report(inp):
        raise ApiError(409, ClientReject.REPORT_CONFLICT.value,
                       "another late outcome was reported first")
    return done.outcome


async def _released_sha256(service: CallService, session_id: str,
                           tool_use_id: str, reported: str) -> str | None:
    """The released hash, from the call's (closed) workflow; `reported` when it
    is that hash in its other form (RFC 8785 or json.dumps, across an upgrade)."""
    try:
        view = await service.query(session_id, tool_use_id)
    except TEMPORAL_NO_ANSWER:
        return None
    if view is None or not view.release:
        return None
    if is_input_sha256(reported, view.release.input):
        return reported
    return view.release.input_sha256


def _status_of(exc: WorkflowUpdateFailedError) -> str | None:
    cause = exc.cause
    if isinstance(cause, ApplicationError) and len(cause.details) > 1:
        info = cause.details[1]
        return info.get("status") if isinstance(info, dict) else None
    return None


def _refusal(exc: WorkflowUpdateFailedError) -> ApiError:
    """The update's refusal as an answer: 409 or 422 with the standing claim."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError) or cause.type != CLIENT_REJECTED_ERROR_TYPE:
        raise ApiError(409, "refused", str(cause or exc))
    details = list(cause.details)
    reason = ClientReject(details[0]) if details else ClientReject.INVALID
    info = details[1] if len(details) > 1 and isinstance(details[1], dict) else {}
    return ApiError(_STATUS.get(reason, 409), reason.value, cause.message, info)


async def _closed(service: CallService, session_id: str, tool_use_id: str,
                  exc: RPCError) -> ApiError:
    """An update the workflow could not take: no such call, or it has ended."""
    if exc.status != RPCStatusCode.NOT_FOUND:
        raise exc
    row = await service.repo.get_call(session_id, tool_use_id)
    if row is None:
        return ApiError(404, "not_found", f"tool call {tool_use_id!r} not found")
    if row.status in (CallStatus.RELEASED, CallStatus.CLAIMED):
        return ApiError(409, ClientReject.NOT_RELEASED.value, "the call is not released")
    why = f": {UNCLAIMED_TEXT}" if row.status == CallStatus.UNCLAIMED else ""
    return ApiError(409, ClientReject.ENDED.value,
                    f"the call has ended ({row.status.value}){why}", {"status": row.status.value})
