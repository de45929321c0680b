"""Agent API under /v1: sessions, tool calls (single, batch, long-poll), decisions,
cancellation, tool definitions, audit queries and the session event stream."""

from __future__ import annotations

import asyncio
import functools
import json
import posixpath
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi import Path as PathParam
from sse_starlette import EventSourceResponse, ServerSentEvent

from parkgate.access import Principal, approver_for, is_self
from parkgate.api import metrics
from parkgate.api.approval_links import (
    link_for_principal,
    links_for_admin,
    named_approvers,
    quorum_of,
    refusal,
    self_approval_of,
    submitter_of,
    visible_approval_link,
)
from parkgate.api.decisions import answer_refused, outcome
from parkgate.api.deps import (
    AgentDep,
    ApproverDep,
    AuditorDep,
    DepsDep,
    ReaderDep,
    RepoDep,
    SecretDep,
    SettingsDep,
)
from parkgate.api.errors import ApiError, ErrorResponse, error_responses, not_found
from parkgate.api.full_output import OutputFormat, output_response
from parkgate.api.routes_remembered import remember_spec
from parkgate.api.schemas import (
    BatchIn,
    BatchOut,
    CallEventsOut,
    CallLinks,
    CallPageOut,
    CallResource,
    CallSummary,
    CancelOut,
    ConfirmationIn,
    ConfirmationOut,
    SessionCancelOut,
    SessionIn,
    SessionOut,
    TimelineEventOut,
    ToolsOut,
)
from parkgate.api.service import CallService, decision_out
from parkgate.durable.client import IdempotencyConflictError
from parkgate.durable.payloads import DecideInput, call_workflow_id
from parkgate.models import Session, ToolUseBlock
from parkgate.records import CallStatus
from parkgate.schema import MAX_INPUT_DEPTH, depth_error
from parkgate.settings import Settings
from parkgate.store.errors import InvalidCursorError, SessionConflictError
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters, EventRecord, SessionRecord
from parkgate.worker_groups import group_for_workspace, in_group_roots

router = APIRouter(prefix="/v1", tags=["agent"])

_ID_RE = r"^[A-Za-z0-9_.:\-]{1,200}$"
SessionId = Annotated[str, PathParam(pattern=_ID_RE, description="Session id.")]
TurnId = Annotated[str, PathParam(pattern=_ID_RE, description="Turn id.")]
ToolUseId = Annotated[str, PathParam(pattern=_ID_RE, description="The tool_use block's id.")]
RequestId = Annotated[str, PathParam(pattern=_ID_RE, description="Approval request id.")]
Wait = Annotated[
    float,
    Query(ge=0, le=60, description="Long-poll up to this many seconds for the result (0-60)."),
]

#: Event seqs are 63-bit integers in both databases.
MAX_SEQ = 2**63 - 1

_LIVE = [CallStatus.QUEUED, CallStatus.PARKED, CallStatus.RUNNING]


def _service(request: Request) -> CallService:
    service: CallService = request.app.state.calls
    return service


async def _session(repo: Repository, session_id: str, principal: Principal) -> SessionRecord:
    """The session, or 404 when it does not exist or belongs to another project."""
    record = await repo.get_session(session_id)
    if record is None or record.project != principal.project:
        raise not_found(f"session {session_id!r}")
    return record


async def _for_principal(
    request: Request, principal: Principal, resource: CallResource
) -> CallResource:
    """The resource as this key may see it: the approval link only for a key
    that may decide, named approvers' personal links only for admins."""
    if resource.request_id is None:
        return resource
    repo: Repository = request.app.state.deps.repo
    approval = await repo.get_approval(resource.request_id)
    if approval is None:
        hidden = resource.links.model_copy(update={"approval": None})
        return resource.model_copy(update={"approval_url": None, "links": hidden})
    settings: Settings = request.app.state.settings
    secret: str = request.app.state.secret
    url = None
    if resource.approval_url is not None:
        url = link_for_principal(settings, secret, principal, approval,
                                 await submitter_of(repo, approval))
    update: dict[str, Any] = {
        "approval_url": url,
        "links": resource.links.model_copy(update={"approval": url}),
    }
    if resource.status == CallStatus.PARKED:
        update["approver_links"] = links_for_admin(settings, secret, principal, approval)
    if named_approvers(approval):
        update["approvers"] = named_approvers(approval)
        update["quorum"] = quorum_of(approval)
        if resource.votes is None and approval.votes:
            update["votes"] = approval.votes
    return resource.model_copy(update=update)


def _reject_too_deep(value: Any, max_depth: int, root: str) -> None:
    """422 `input_too_deep` for a tool input (submitted or edited) nested too deeply:
    such an input could not travel the durable path."""
    too_deep = depth_error(value, max_depth, root=root)
    if too_deep is not None:
        path = too_deep.split(":", 1)[0]
        raise ApiError(
            422,
            "input_too_deep",
            too_deep,
            [{"loc": path.split("."), "msg": f"nested deeper than {max_depth} levels",
              "type": "too_deep", "max_depth": max_depth}],
        )


def _check_tool_use_id(call: ToolUseBlock, max_depth: int = MAX_INPUT_DEPTH) -> None:
    _reject_too_deep(call.input, max_depth, "body.input")
    _reject_unencodable(call.name, ["body", "name"])
    _reject_unencodable(call.input, ["body", "input"])
    if not re.fullmatch(_ID_RE, call.id):
        raise ApiError(
            422,
            "invalid_request",
            "tool_use id may contain only letters, digits and _ . : -",
            [{"loc": ["body", "id"], "msg": "invalid characters", "type": "value_error"}],
        )


def _reject_unencodable(value: Any, loc: list[str]) -> None:
    """422 for text that is valid JSON but not valid Unicode (lone surrogates such
    as "\\ud800"): it cannot be hashed, stored or sent to a worker."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(
                422,
                "invalid_text",
                f"{'.'.join(loc)}: text is not valid Unicode (lone surrogate at "
                f"position {exc.start})",
                [{"loc": loc, "msg": "lone surrogate", "type": "unicode_error"}],
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_unencodable(key, [*loc, "<key>"])
            _reject_unencodable(item, [*loc, str(key)])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_unencodable(item, [*loc, str(index)])


def _in_roots(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _check_workspace(raw_path: str, settings: Settings) -> Path:
    """The resolved workspace, or a 422 saying why it is not acceptable."""
    if "\x00" in raw_path:
        raise ApiError(422, "invalid_workspace", "workspace_path contains a NUL byte")
    raw = Path(raw_path)  # the server's "~" means nothing to a remote agent
    if not raw.is_absolute():
        raise ApiError(422, "invalid_workspace", "workspace_path must be an absolute path")
    try:
        resolved = raw.resolve()
    except (OSError, RuntimeError) as exc:
        raise ApiError(
            422, "invalid_workspace", f"workspace_path cannot be resolved: {exc}"
        ) from exc
    if not _in_roots(resolved, settings.workspace_roots):
        raise ApiError(
            422,
            "workspace_not_allowed",
            "workspace_path is not under any configured workspace root",
            {"workspace_roots": [str(r) for r in settings.workspace_roots]},
        )
    if not resolved.is_dir():
        raise ApiError(422, "invalid_workspace", "workspace_path is not an existing directory")
    return resolved


def _worker_group(body: SessionIn, settings: Settings) -> str | None:
    """The session's worker group: the one named (it must be configured), else the
    group whose root holds the workspace, else None (any worker)."""
    groups = settings.worker_groups
    if body.worker_group is not None:
        if body.worker_group not in groups:
            raise ApiError(
                422,
                "unknown_worker_group",
                f"worker group {body.worker_group!r} is not configured",
                {"worker_groups": sorted(groups)},
            )
        return body.worker_group
    return group_for_workspace(body.workspace_path, groups)


def _check_remote_workspace(raw_path: str, group: str, settings: Settings) -> PurePosixPath:
    """A grouped session's workspace, checked without touching this host's disk:
    absolute, normalized, under the group's roots or the workspace roots."""
    if "\x00" in raw_path:
        raise ApiError(422, "invalid_workspace", "workspace_path contains a NUL byte")
    if not raw_path.startswith("/"):
        raise ApiError(422, "invalid_workspace", "workspace_path must be an absolute path")
    path = PurePosixPath(posixpath.normpath(raw_path))
    roots = [*settings.worker_groups.get(group, []), *settings.workspace_roots]
    if not in_group_roots(path, roots):
        raise ApiError(
            422,
            "workspace_not_allowed",
            f"workspace_path is not under a root of worker group {group!r} "
            "or a configured workspace root",
            {"workspace_roots": [str(r) for r in roots]},
        )
    return path


# ---------------------------------------------------------------- sessions
@router.post(
    "/sessions",
    response_model=SessionOut,
    status_code=201,
    responses={200: {"model": SessionOut, "description": "Already registered (same workspace)"},
               **error_responses(401, 403, 429, 409, 413, 422)},
    summary="Register a session and its workspace",
)
async def register_session(
    body: SessionIn, repo: RepoDep, settings: SettingsDep, key: AgentDep, response: Response
) -> SessionOut:
    _reject_unencodable(body.workspace_path, ["body", "workspace_path"])
    group = _worker_group(body, settings)
    resolved: Path | PurePosixPath
    if group is None:
        resolved = await asyncio.to_thread(_check_workspace, body.workspace_path, settings)
    else:
        # The workspace lives on the group's hosts, not necessarily here: a
        # lexical check only; the group's worker resolves it when it classifies.
        resolved = _check_remote_workspace(body.workspace_path, group, settings)
    try:
        record, created = await repo.register_session(
            body.session_id, str(resolved), body.kind,
            project=key.project, registered_by=key.key_id,
            worker_group=group, group_explicit=body.worker_group is not None,
        )
    except SessionConflictError as exc:
        details: dict[str, Any] = {"session_id": exc.session_id}
        if exc.existing_workspace is not None:  # never another project's workspace
            details["workspace_path"] = exc.existing_workspace
        if exc.existing_group is not None:
            details["worker_group"] = exc.existing_group
        raise ApiError(409, "session_conflict", str(exc), details) from exc
    if not created:
        response.status_code = 200
    return SessionOut(**record.model_dump())


@router.get(
    "/sessions/{session_id}",
    response_model=SessionOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="A registered session",
)
async def get_session(session_id: SessionId, repo: RepoDep, key: ReaderDep) -> SessionOut:
    return SessionOut(**(await _session(repo, session_id, key)).model_dump())


# -------------------------------------------------------------- tool calls
@router.post(
    "/sessions/{session_id}/turns/{turn_id}/tool-calls",
    response_model=CallResource,
    status_code=202,
    responses={200: {"model": CallResource, "description": "The call has finished"},
               202: {"model": CallResource, "description": "Not finished yet"},
               **error_responses(401, 403, 429, 404, 409, 413, 422)},
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
) -> CallResource:
    _check_tool_use_id(call, settings.max_input_depth)
    record = await _session(repo, session_id, key)
    await repo.record_submission(session_id, [call.id], key.key_id, key.name)
    session = Session(
        session_id=session_id,
        turn_id=turn_id,
        workspace_path=record.workspace_path,
        kind=record.kind,  # type: ignore[arg-type]
        worker_group=record.worker_group,
    )
    service = _service(request)
    try:
        await service.start_call(call, session)
    except IdempotencyConflictError as exc:
        raise ApiError(
            409,
            "idempotency_conflict",
            str(exc),
            {
                "tool_use_id": exc.tool_use_id,
                "existing": {"tool": exc.existing_tool, "input_hash": exc.existing_hash},
                "submitted": {"tool": exc.submitted_tool, "input_hash": exc.submitted_hash},
            },
        ) from None
    metrics.count_submission(call.name)
    resource = await service.wait(session_id, call.id, wait, turn_id=turn_id)
    if resource is None:
        resource = _queued(session_id, turn_id, call)
    response.status_code = 200 if resource.finished else 202
    return await _for_principal(request, key, resource)


def _queued(session_id: str, turn_id: str, call: ToolUseBlock) -> CallResource:
    base = f"/v1/sessions/{session_id}/tool-calls/{call.id}"
    return CallResource(
        tool_use_id=call.id,
        session_id=session_id,
        turn_id=turn_id,
        tool_name=call.name,
        status=CallStatus.QUEUED,
        links=CallLinks(self=base, events=f"{base}/events", cancel=f"{base}/cancel"),
    )


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/tool-calls:batch",
    response_model=BatchOut,
    status_code=202,
    responses={200: {"model": BatchOut, "description": "Every call has finished"},
               202: {"model": BatchOut, "description": "Some calls are not finished"},
               **error_responses(401, 403, 429, 404, 413, 422)},
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
    seen: set[str] = set()
    for call in body.calls:
        _check_tool_use_id(call, settings.max_input_depth)
        if call.id in seen:
            raise ApiError(422, "duplicate_tool_use_id", f"tool_use id {call.id!r} appears twice")
        seen.add(call.id)
    record = await _session(repo, session_id, key)
    await repo.record_submission(session_id, [c.id for c in body.calls], key.key_id, key.name)
    session = Session(
        session_id=session_id,
        turn_id=turn_id,
        workspace_path=record.workspace_path,
        kind=record.kind,  # type: ignore[arg-type]
        worker_group=record.worker_group,
    )
    service = _service(request)
    handle = await service.start_turn(body.calls, session)
    for call in body.calls:
        metrics.count_submission(call.name)
    await service.wait_turn(handle, wait)
    resources = await asyncio.gather(
        *(service.resource(session_id, c.id, turn_id=turn_id) for c in body.calls)
    )
    calls = [
        await _for_principal(request, key, r) if r is not None else _queued(session_id, turn_id, c)
        for r, c in zip(resources, body.calls, strict=True)
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
    await _session(repo, session_id, key)
    service = _service(request)
    resource = await service.resource(session_id, tool_use_id)
    if resource is not None and not resource.finished and wait > 0:
        resource = await service.wait(session_id, tool_use_id, wait)
    if resource is None:
        raise not_found(f"tool call {tool_use_id!r}")
    response.status_code = 200 if resource.finished else 202
    return await _for_principal(request, key, resource)


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
    await _session(repo, session_id, key)
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
    key: AgentDep,
) -> CancelOut:
    await _session(repo, session_id, key)
    service = _service(request)
    cancelled = await service.cancel(session_id, tool_use_id)
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
    session_id: SessionId, request: Request, repo: RepoDep, key: AgentDep
) -> SessionCancelOut:
    await _session(repo, session_id, key)
    service = _service(request)
    count = 0
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        page = await repo.list_calls(
            CallFilters(session_id=session_id, status=list(_LIVE)), limit=200, cursor=cursor
        )
        for row in page.items:
            seen.add(call_workflow_id(session_id, row.tool_use_id))
            try:
                if await service.cancel(session_id, row.tool_use_id):
                    count += 1
            except ApiError:
                continue  # no workflow for this row (never started): nothing to cancel
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    # Calls wedged before they were classified have no row: end those too.
    count += await service.dispatcher.end_wedged_in_session(session_id, seen)
    return SessionCancelOut(session_id=session_id, cancelled=count)


# ------------------------------------------------------------- definitions
@router.get(
    "/sessions/{session_id}/tools",
    response_model=ToolsOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="Tool definitions visible to a session",
)
async def list_tools(
    session_id: SessionId,
    deps: DepsDep,
    repo: RepoDep,
    key: ReaderDep,
    format: Annotated[Literal["canonical", "openai", "anthropic"], Query()] = "canonical",
) -> ToolsOut:
    record = await _session(repo, session_id, key)
    session = Session(
        session_id=session_id,
        turn_id="-",
        workspace_path=record.workspace_path,
        kind=record.kind,  # type: ignore[arg-type]
        worker_group=record.worker_group,
    )
    definitions = deps.registry.definitions_for(session)
    if format == "openai":
        tools = [d.to_openai() for d in definitions]
    elif format == "anthropic":
        tools = [d.to_anthropic() for d in definitions]
    else:
        tools = [d.model_dump(mode="json") for d in definitions]
    return ToolsOut(session_id=session_id, format=format, tools=tools)


# ------------------------------------------------------------ confirmations
@router.post(
    "/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}",
    response_model=ConfirmationOut,
    responses={202: {"model": ConfirmationOut,
                     "description": "Approval counted toward a quorum not yet met"},
               409: {"model": ErrorResponse,
                     "description": "Someone decided first (error.details.winner), "
                     "or the call is no longer waiting"},
               **error_responses(401, 403, 404, 413, 422, 429)},
    summary="Decide a parked call (first decision wins)",
)
async def confirm(
    session_id: SessionId,
    turn_id: TurnId,
    request_id: RequestId,
    body: ConfirmationIn,
    request: Request,
    repo: RepoDep,
    settings: SettingsDep,
    key: ApproverDep,
    response: Response,
) -> ConfirmationOut:
    if body.edited_input is not None:
        _reject_too_deep(body.edited_input, settings.max_input_depth, "body.edited_input")
    _reject_unencodable(body.model_dump(), ["body"])
    await _session(repo, session_id, key)
    approval = await repo.get_approval(request_id)
    if approval is None or approval.session_id != session_id or approval.turn_id != turn_id:
        raise not_found(f"approval request {request_id!r}")
    submitter = await submitter_of(repo, approval)
    why = refusal(settings, key, approval, submitter)
    if why is not None:
        raise ApiError(403, "forbidden", why)
    named = named_approvers(approval)
    acting_as = approver_for(key, named, settings.approver_keys()) if named else None
    remember = None
    if body.remember is not None:
        remember = await remember_spec(
            repo, **body.remember.model_dump(), decision=body.decision,
            quorum=quorum_of(approval), session_id=session_id,
            sub_call=bool((approval.info or {}).get("parent_tool_use_id")),
            tool_use_id=approval.tool_use_id, edited_input=body.edited_input,
            approver=acting_as,
        )
    # The key is the decider; a `decided_by` in the body is only a claim.
    claimed = body.decided_by.strip() if body.decided_by else None
    result = await _service(request).decide(
        session_id,
        approval.tool_use_id,
        DecideInput(
            request_id=request_id,
            decision=body.decision,
            reason=body.reason,
            decided_by=key.name,
            via="api",
            edited_input=body.edited_input,
            principal_id=key.principal_id,
            claimed_name=claimed if claimed and claimed != key.name else None,
            self_approved=is_self(key, submitter) and self_approval_of(approval),
            approver=acting_as,
            remember=remember,
        ),
    )
    metrics.count_decision(body.decision, outcome(result))
    if result.accepted and result.winner is None:
        # One approval of a quorum: counted, the call waits for the others.
        response.status_code = 202
        return ConfirmationOut(accepted=True, message=result.message,
                               votes=result.votes, quorum=result.quorum)
    if result.accepted and result.winner is not None:
        metrics.observe_approval_latency(
            body.decision, "api", (result.winner.decided_at - approval.requested_at).total_seconds()
        )
        return ConfirmationOut(
            accepted=True, decision=decision_out(result.winner), message=result.message
        )
    refused = answer_refused(result)
    if refused.status != 409:
        raise ApiError(refused.status, refused.code, refused.message)
    details: dict[str, Any] = {}
    if result.winner is not None:
        details["winner"] = decision_out(result.winner).model_dump(mode="json")
    else:
        stored = await repo.get_approval(request_id)
        if stored is not None and stored.decision is not None:
            details["winner"] = {
                "request_id": stored.request_id,
                "decision": stored.decision,
                "decided_by": stored.decided_by,
                "principal_id": stored.principal_id,
                "claimed_name": stored.claimed_name,
                "via": stored.via,
                "reason": stored.reason,
                "decided_at": stored.decided_at.isoformat() if stored.decided_at else None,
            }
    raise ApiError(refused.status, refused.code, refused.message, details)


# -------------------------------------------------------------------- audit
@router.get(
    "/tool-calls",
    response_model=CallPageOut,
    responses=error_responses(401, 403, 429, 422),
    tags=["audit"],
    summary="Audit query: calls newest first, keyset-paginated",
)
async def list_calls(
    repo: RepoDep,
    key: AuditorDep,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    turn_id: Annotated[str | None, Query(max_length=200)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[list[CallStatus] | None, Query()] = None,
    side_effects: Annotated[
        Literal["none", "read", "write", "execute", "network"] | None, Query()
    ] = None,
    decided_by: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="created_at >= since")] = None,
    until: Annotated[datetime | None, Query(description="created_at < until")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    after: Annotated[
        str | None, Query(max_length=500, description="next_cursor of the previous page")
    ] = None,
) -> CallPageOut:
    filters = CallFilters(
        session_id=session_id,
        turn_id=turn_id,
        tool_name=tool_name,
        status=status or None,
        side_effects=side_effects,
        decided_by=decided_by,
        since=_aware(since),
        until=_aware(until),
        project=key.project,
    )
    try:
        page = await repo.list_calls(filters, limit=limit, cursor=after or None)
    except InvalidCursorError as exc:
        raise ApiError(422, "invalid_cursor", str(exc)) from exc
    items = [CallSummary.model_validate(row.model_dump()) for row in page.items]
    return CallPageOut(items=items, next_cursor=page.next_cursor)


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


@router.get(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/events",
    response_model=CallEventsOut,
    responses=error_responses(401, 403, 429, 404, 422),
    tags=["audit"],
    summary="One call's timeline",
)
async def call_events(
    session_id: SessionId,
    tool_use_id: ToolUseId,
    repo: RepoDep,
    settings: SettingsDep,
    secret: SecretDep,
    key: ReaderDep,
) -> CallEventsOut:
    await _session(repo, session_id, key)
    entries = await repo.timeline(session_id, tool_use_id)
    if not entries and await repo.get_call(session_id, tool_use_id) is None:
        raise not_found(f"tool call {tool_use_id!r}")
    events = [
        TimelineEventOut(
            **_event_fields(e.event.model_dump()),
            approval_url=await visible_approval_link(repo, settings, secret, key, e.event),
            since_previous_ms=e.since_previous_ms,
            since_start_ms=e.since_start_ms,
        )
        for e in entries
    ]
    return CallEventsOut(session_id=session_id, tool_use_id=tool_use_id, events=events)


_EVENT_KEYS = set(TimelineEventOut.model_fields) - {"since_previous_ms", "since_start_ms"}


def _event_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in _EVENT_KEYS}


# --------------------------------------------------------------------- SSE
#: One server-sent event: `id` is the event seq, `event` its type, `data` the
#: EventOut JSON.
_SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The event seq (use as Last-Event-ID)."},
        "event": {"type": "string", "description": "tool.called, tool.completed, ..."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "The event as JSON (EventOut).",
        },
        "retry": {"type": "integer"},
    },
}

@router.get(
    "/sessions/{session_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "text/event-stream of tool.* events; each `id` is the event seq.",
            "content": {"text/event-stream": {"schema": _SSE_EVENT_SCHEMA}},
        },
        **error_responses(401, 403, 429, 404, 422),
    },
    summary="Live tool.* events of a session (Server-Sent Events, resumable)",
)
async def session_events(
    session_id: SessionId,
    request: Request,
    deps: DepsDep,
    repo: RepoDep,
    settings: SettingsDep,
    secret: SecretDep,
    key: ReaderDep,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=40, include_in_schema=True)
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_SEQ, description="Start after this seq (like Last-Event-ID)"),
    ] = None,
    follow: Annotated[bool, Query(description="Keep the stream open for new events")] = True,
) -> EventSourceResponse:
    await _session(repo, session_id, key)
    start = after or 0
    if last_event_id:
        try:
            start = int(last_event_id)
        except ValueError as exc:
            raise ApiError(
                422, "invalid_last_event_id", "Last-Event-ID must be an event seq"
            ) from exc
        if not 0 <= start <= MAX_SEQ:
            raise ApiError(422, "invalid_last_event_id", f"Last-Event-ID must be 0..{MAX_SEQ}")
    links = functools.partial(visible_approval_link, repo, settings, secret, key)
    return EventSourceResponse(
        _stream(repo, session_id, start, follow, deps.sse_poll_seconds, request, links),
        ping=15,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    repo: Repository,
    session_id: str,
    after_seq: int,
    follow: bool,
    poll: float,
    request: Request,
    links: Callable[[EventRecord], Awaitable[str | None]],
) -> AsyncIterator[ServerSentEvent]:
    last = after_seq
    while True:
        batch = await repo.events_after(session_id, last, limit=500)
        for ev in batch:
            last = ev.seq
            payload = _event_fields(ev.model_dump(mode="json"))
            payload["approval_url"] = await links(ev)
            yield ServerSentEvent(data=json.dumps(payload), event=ev.type, id=str(ev.seq))
        if batch:
            continue
        if not follow or await request.is_disconnected():
            return
        await asyncio.sleep(poll)

