"""/v1 tool calls: submit one or a turn's batch, read (long-poll), output, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from parkgate.api.agents import client_calls, tool_classes
from parkgate.api.agents.attach import same_input_call
from parkgate.api.agents.v1.common import (
    LIVE,
    SessionId,
    ToolUseId,
    TurnId,
    Wait,
    call_service,
    check_tool_use_id,
    for_principal,
    session_of,
)
from parkgate.api.shared import metrics
from parkgate.api.shared.deps import (
    AgentDep,
    ReaderDep,
    RepoDep,
    SettingsDep,
)
from parkgate.api.shared.errors import ApiError, error_responses, not_found
from parkgate.api.shared.full_output import OutputFormat, output_response
from parkgate.api.shared.schemas import (
    BatchIn,
    BatchOut,
    CallLinks,
    CallResource,
    CancelIn,
    CancelOut,
    SessionCancelOut,
)
from parkgate.api.shared.service import CallService
from parkgate.approvals.access import Principal
from parkgate.calls.cancellation import VIA_API, VIA_SESSION, Cancellation
from parkgate.calls.records import CallStatus
from parkgate.client_tools import declared
from parkgate.durable.dispatcher import IdempotencyConflictError
from parkgate.durable.payloads import call_workflow_id
from parkgate.models import Session, ToolDefinition, ToolUseBlock
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters, SessionRecord

router = APIRouter(prefix="/v1", tags=["agent"])
#: A submit with claim=true and no wait still waits this long for policy's verdict.
CLAIM_VERDICT_SECONDS = 10.0


def _submit_responses(model: type, done: str, not_done: str) -> dict[int | str, Any]:
    """The OpenAPI answers of a submit (single or batch): 200 done, 202 not yet, errors."""
    return {200: {"model": model, "description": done},
            202: {"model": model, "description": not_done},
            **error_responses(401, 403, 429, 404, 409, 413, 422)}


async def _accepted(
    calls: list[ToolUseBlock], session_id: str, turn_id: str, request: Request,
    repo: Repository, key: Principal, settings: Settings,
) -> tuple[SessionRecord, Session, CallService]:
    """What every submit does first (one call or a batch): check the ids (422, a
    batch naming one twice too), find the session (404/403) and record who
    submitted; the session as this turn sees it and the call service."""
    seen: set[str] = set()
    for call in calls:
        check_tool_use_id(call, settings.max_input_depth)
        if call.id in seen:
            raise ApiError(422, "duplicate_tool_use_id", f"tool_use id {call.id!r} appears twice")
        seen.add(call.id)
    record = await session_of(repo, session_id, key)
    await repo.record_submission(session_id, [c.id for c in calls], key.key_id, key.name)
    return record, record.for_turn(turn_id), call_service(request)


def _declared(record: SessionRecord, request: Request,
              settings: Settings) -> list[ToolDefinition]:
    """The session's client tools, none looser than the deployment's class."""
    return declared.definitions(
        record.client_tools, tool_classes.floor(settings, request.app.state.deps.registry))


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/tool-calls",
    response_model=CallResource,
    status_code=202,
    responses=_submit_responses(CallResource, "The call has finished", "Not finished yet"),
    summary="Submit (or re-attach to) one tool call",
)
async def submit_call(
    session_id: SessionId,
    turn_id: TurnId,
    call: ToolUseBlock,
    request: Request,
    repo: RepoDep,
    key: AgentDep,
    settings: SettingsDep,
    response: Response,
    wait: Wait = 0,
    claim: Annotated[bool, Query(
        description="A client tool's call: claim it for this request when it is released "
        "(policy releases it at once: the claim is taken with the release, no claim "
        "request). The answer says `claim_won: true` with the input to run and the "
        "`claim_id` to start (`POST .../start`) before running it. Without "
        "`wait` it still waits for policy's verdict (a few seconds at most).")] = False,
    lease_seconds: Annotated[float | None, Query(
        gt=0, description="With claim=true: the lease asked for (capped by the server's "
        "client_lease_max_seconds).")] = None,
) -> CallResource:
    record, session, service = await _accepted(
        [call], session_id, turn_id, request, repo, key, settings)
    attached = await same_input_call(repo, settings, record, call)
    if attached is not None:
        # A fresh id for the same tool and input as a still-parked call of this
        # session (e.g. a model retrying through MCP): that call answers.
        call = call.model_copy(update={"id": attached})
    tools = _declared(record, request, settings)
    inp = client_calls.claim_input(settings, key.key_id, key.name, client_calls.lease_for(
        lease_seconds, settings.client_lease_seconds,
        settings.client_lease_max_seconds)) if claim else None
    started = False
    try:
        if inp is not None:
            started = await client_calls.start_claiming(service, call, session, tools, inp)
        else:
            await service.start_call(call, session, tools)
    except IdempotencyConflictError as exc:
        raise _conflict(exc) from None
    metrics.count_submission(call.name)
    if started and wait == 0:
        # A claim taken at the release is this request's only: wait for policy's
        # verdict (released and claimed, parked, denied), not for a human.
        resource = await service.wait(session_id, call.id, CLAIM_VERDICT_SECONDS,
                                      turn_id=turn_id, claiming=True, classified=True)
    else:
        resource = await service.wait(session_id, call.id, wait, turn_id=turn_id,
                                      claiming=inp is not None)
    if resource is None:
        resource = _queued(session_id, turn_id, call)
    elif inp is not None:
        resource = await client_calls.claimed_for_submitter(
            service, resource, call, inp, started=started, gone=request.is_disconnected)
    response.status_code = 200 if resource.finished else 202
    return await for_principal(request, key, resource)


def _conflict(exc: IdempotencyConflictError) -> ApiError:
    """409: the id was used for another call (it would get that call's result)."""
    return ApiError(
        409,
        "idempotency_conflict",
        str(exc),
        {
            "tool_use_id": exc.tool_use_id,
            "existing": {"tool": exc.existing_tool, "input_hash": exc.existing_hash},
            "submitted": {"tool": exc.submitted_tool, "input_hash": exc.submitted_hash},
        },
    )


def _queued(session_id: str, turn_id: str, call: ToolUseBlock) -> CallResource:
    return CallResource(
        tool_use_id=call.id,
        session_id=session_id,
        turn_id=turn_id,
        tool_name=call.name,
        status=CallStatus.QUEUED,
        links=CallLinks.of(session_id, call.id),
    )


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/tool-calls:batch",
    response_model=BatchOut,
    status_code=202,
    responses=_submit_responses(BatchOut, "Every call has finished",
                                "Some calls are not finished"),
    summary="Submit one assistant message's tool calls as a turn",
)
async def submit_batch(
    session_id: SessionId,
    turn_id: TurnId,
    body: BatchIn,
    request: Request,
    repo: RepoDep,
    key: AgentDep,
    settings: SettingsDep,
    response: Response,
    wait: Wait = 0,
) -> BatchOut:
    record, session, service = await _accepted(
        body.calls, session_id, turn_id, request, repo, key, settings)
    try:
        started = await service.start_turn(body.calls, session,
                                           _declared(record, request, settings))
    except IdempotencyConflictError as exc:
        raise _conflict(exc) from None
    for call in body.calls:
        metrics.count_submission(call.name)
    await service.wait_turn(session_id, started, wait)
    # A call submitted before (alone or in another turn) was attached, as the
    # single-call route attaches: it is answered with the turn it belongs to.
    turns = [started.attached.get(c.id, turn_id) for c in body.calls]
    resources = await asyncio.gather(
        *(service.resource(session_id, c.id, turn_id=t) for c, t in zip(body.calls, turns,
                                                                        strict=True))
    )
    calls = [
        await for_principal(request, key, r) if r is not None else _queued(session_id, t, c)
        for r, c, t in zip(resources, body.calls, turns, strict=True)
    ]
    finished = all(c.finished for c in calls)
    response.status_code = 200 if finished else 202
    return BatchOut(session_id=session_id, turn_id=turn_id, finished=finished, calls=calls)


@router.get(
    "/sessions/{session_id}/tool-calls/{tool_use_id}",
    response_model=CallResource,
    responses={200: {"model": CallResource, "description": "The call has finished"},
               202: {"model": CallResource, "description": "Not finished yet"},
               **error_responses(401, 403, 429, 404, 422)},
    summary="Status and result of one call (optionally long-polling)",
)
async def get_call(
    session_id: SessionId,
    tool_use_id: ToolUseId,
    request: Request,
    repo: RepoDep,
    key: ReaderDep,
    response: Response,
    wait: Wait = 0,
) -> CallResource:
    await session_of(repo, session_id, key)
    service = call_service(request)
    resource = await service.resource(session_id, tool_use_id)
    if resource is not None and wait > 0 and not resource.finished:
        # `finished` comes from the store's final row only: nothing to wait for.
        resource = await service.wait(session_id, tool_use_id, wait)
    if resource is None:
        raise not_found(f"tool call {tool_use_id!r}")
    response.status_code = 200 if resource.finished else 202
    return await for_principal(request, key, resource)


@router.get(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/output",
    responses={200: {"description": "The untruncated output (text or JSON)",
                     "content": {"text/plain": {}, "application/json": {}}},
               **error_responses(401, 403, 429, 404, 422)},
    summary="Download the whole output of a finished call (the model saw it truncated)",
)
async def get_call_output(
    session_id: SessionId,
    tool_use_id: ToolUseId,
    repo: RepoDep,
    key: ReaderDep,
    format: Annotated[OutputFormat, Query()] = "text",
) -> Response:
    await session_of(repo, session_id, key)
    record = await repo.get_call(session_id, tool_use_id)
    if record is None:
        raise not_found(f"tool call {tool_use_id!r}")
    out = output_response(record, format)
    if out is None:
        raise not_found(f"output of tool call {tool_use_id!r}")
    return out


@router.post(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/cancel",
    response_model=CancelOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="Cancel one call (parked calls end without running)",
)
async def cancel_call(
    session_id: SessionId, tool_use_id: ToolUseId, request: Request, repo: RepoDep,
    key: AgentDep, body: CancelIn | None = None,
) -> CancelOut:
    """The key (or signed-in person) and the body's optional reason are
    recorded with the call's end."""
    await session_of(repo, session_id, key)
    service = call_service(request)
    cancelled = await service.cancel(session_id, tool_use_id, Cancellation(
        by=key.label, via=VIA_API, reason=body.reason if body else None))
    resource = await service.resource(session_id, tool_use_id)
    if not cancelled:
        message = "the call had already finished"
    elif resource is not None and resource.finished:
        message = "cancelled"  # e.g. a call whose workflow could not proceed, ended at once
    else:
        message = "cancellation requested"
    return CancelOut(
        cancelled=cancelled,
        status=resource.status if resource else None,
        message=message,
    )


@router.post(
    "/sessions/{session_id}/cancel",
    response_model=SessionCancelOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="Cancel every unfinished call of a session",
)
async def cancel_session(
    session_id: SessionId, request: Request, repo: RepoDep, key: AgentDep,
    body: CancelIn | None = None,
) -> SessionCancelOut:
    await session_of(repo, session_id, key)
    service = call_service(request)
    cancellation = Cancellation(by=key.label, via=VIA_SESSION,
                                reason=body.reason if body else None)
    count = 0
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        page = await repo.list_calls(
            CallFilters(session_id=session_id, status=list(LIVE)), limit=200, cursor=cursor
        )
        for row in page.items:
            seen.add(call_workflow_id(session_id, row.tool_use_id))
            try:
                if await service.cancel(session_id, row.tool_use_id, cancellation):
                    count += 1
            except ApiError:
                continue  # no workflow for this row (never started): nothing to cancel
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    # Calls wedged before they were classified have no row: end those too.
    count += await service.dispatcher.end_wedged_in_session(session_id, seen)
    return SessionCancelOut(session_id=session_id, cancelled=count)
