"""parkgate as an MCP server: `/v1/sessions/{session_id}/mcp`, streamable HTTP.

Built on the official SDK's low-level `Server` and `StreamableHTTPSessionManager`
(stateless: every POST carries the API key, so no MCP session state is kept).
`tools/list` is the session's tools with annotations from their side-effect
class; `tools/call` goes through the same CallService as the /v1 submit route
(classify -> park -> execute, at most once, idempotent by tool_use_id). A parked
call holds the request with progress notifications until it is decided or
`mcp_call_wait_seconds` pass; then the result is an error naming the
tool_use_id, and calling again with `_meta.tool_use_id` attaches to the call.
A client that asks for an MCP task gets one instead (parkgate.api.agents.mcp_tasks); a
2026-07-28 client without tasks gets `input_required` (parkgate.api.agents.mcp_rounds).
The route is mounted by parkgate.api.agents.mcp_endpoint, which imports this module
(and the SDK) on the endpoint's first request.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from parkgate import jcs
from parkgate.api.agents import mcp_rounds, mcp_tasks, tool_classes
from parkgate.api.agents.attach import same_input_call
from parkgate.api.agents.mcp_common import (
    META_TOOL_USE_ID,
    META_TURN_ID,
    STATE_KEY,
    Caller,
    caller_of,
    error_result,
    finished_result,
    released_result,
    result_meta,
)
from parkgate.api.agents.mcp_tasks import McpTasks
from parkgate.api.shared.approval_links import link_for_principal, submitter_of
from parkgate.api.shared.deps import ApiDeps, principal_of
from parkgate.api.shared.ratelimit import RateLimiter
from parkgate.api.shared.schemas import ID_RE, CallResource
from parkgate.api.shared.service import CallService
from parkgate.approvals.access import Principal, Role
from parkgate.calls.records import CallStatus
from parkgate.client_tools import declared
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER
from parkgate.durable.dispatcher import IdempotencyConflictError
from parkgate.models import SideEffects, ToolDefinition, ToolUseBlock
from parkgate.schema import depth_error
from parkgate.settings import Settings

_ID_RE = re.compile(ID_RE)
_READERS = (Role.AGENT, Role.APPROVER, Role.AUDITOR, Role.ADMIN)


def annotations_for(definition: ToolDefinition) -> types.ToolAnnotations:
    """MCP hints from the side-effect class (capability, not usage)."""
    effects = definition.side_effects
    read_only = not effects.mutates
    return types.ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=None if read_only else True,
        idempotent_hint=True if read_only else None,
        open_world_hint=effects in (SideEffects.EXECUTE, SideEffects.NETWORK),
    )


def mcp_tool(definition: ToolDefinition) -> types.Tool:
    return types.Tool(
        name=definition.name,
        description=definition.description,
        input_schema=definition.input_schema,
        annotations=annotations_for(definition),
        meta={"parkgate/side_effects": definition.side_effects.value},
        # 2025-11-25 clients may ask for a task (docs/HTTP.md, "MCP tasks").
        execution=types.ToolExecution(task_support="optional"),
    )


class McpGateway:
    """The ASGI endpoint: authenticate the key, find the session, hand to the SDK."""

    def __init__(self, settings: Settings, deps: ApiDeps, calls: CallService) -> None:
        self.settings = settings
        self.deps = deps
        self.calls = calls
        self.secret = settings.signing_secret()
        self.wait_seconds = settings.mcp_call_wait_seconds
        self.progress_seconds = settings.mcp_progress_seconds
        self.server: Server[Any] = Server(
            "parkgate",
            version="0.1.0",
            instructions=(
                "Tool calls go through parkgate's gate: some wait for a human decision. "
                "A call still waiting when the request ends returns an error naming its "
                "tool_use_id; call the tool again with _meta.tool_use_id set to it to attach."
            ),
            on_list_tools=self._list_tools,
        )
        # Registered directly: a task-augmented call answers with a task, not a result.
        self.server.add_request_handler("tools/call", types.CallToolRequestParams,
                                        self._call_tool)
        self.tasks = McpTasks(settings, deps.repo, calls)
        self.tasks.install(self.server)
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True)
        self.running = False
        self._runs = 0

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The SDK's session manager must live as long as the app (app lifespan).

        A manager runs once, so each lifespan (a test client entering the app
        again) gets a fresh one."""
        if self._runs:
            self.manager = StreamableHTTPSessionManager(self.server, stateless=True)
        self._runs += 1
        async with self.manager.run():
            self.running = True
            try:
                yield
            finally:
                self.running = False

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = await self._authenticate(Request(scope, receive))
        except _Refused as refused:
            await refused.response(scope, receive, send)
            return
        if not self.running:
            await _Refused(503, "unavailable", "the MCP endpoint needs the app lifespan "
                           "(run the server with lifespan on)").response(scope, receive, send)
            return
        scope.setdefault("state", {})[STATE_KEY] = caller
        await self.manager.handle_request(scope, receive, send)

    async def _authenticate(self, request: Request) -> Caller:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(401, "unauthorized",
                           "missing API key: send `Authorization: Bearer <key>`")
        record = await self.deps.repo.verify_api_key(token.strip())
        if record is None:
            raise _Refused(401, "unauthorized", "invalid or revoked API key")
        limiter: RateLimiter = request.app.state.rate_limiter
        wait = limiter.check(record.id)
        if wait is not None:
            raise _Refused(429, "rate_limited",
                           f"too many requests from API key {record.name!r}; "
                           f"retry after {wait:.1f} s",
                           headers={"Retry-After": RateLimiter.retry_after(wait)})
        principal = principal_of(record)
        if not principal.has(*_READERS):
            raise _Refused(403, "forbidden", f"API key {record.name!r} has no role")
        session_id = str(request.path_params.get("session_id", ""))
        session = await self.deps.repo.get_session(session_id) if _ID_RE.match(
            session_id) else None
        if session is None or session.project != principal.project:
            raise _Refused(404, "not_found", f"session {session_id!r} not found")
        return Caller(principal, session)

    # -------------------------------------------------------------- handlers
    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = caller_of(ctx)
        definitions = self.deps.registry.definitions_for(caller.session.for_turn("-"))
        return types.ListToolsResult(tools=[mcp_tool(d) for d in definitions])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        caller = caller_of(ctx)
        as_task = mcp_tasks.requested(ctx, params)
        meta = dict(ctx.meta or {})
        named = self._named_call(ctx, caller, params)
        if named is not None:  # a retry with parkgate's requestState: attach to that call
            meta.update({META_TOOL_USE_ID: named.tool_use_id, META_TURN_ID: named.turn_id})
        if not caller.principal.has(Role.AGENT):
            return error_result(f"API key {caller.principal.name!r} lacks the agent role: "
                          "it may list tools but not call them")
        tool_use_id = str(meta.get(META_TOOL_USE_ID) or f"mcp_{uuid.uuid4().hex}")
        turn_id = str(meta.get(META_TURN_ID) or "mcp")
        for label, value in (("tool_use_id", tool_use_id), ("turn_id", turn_id)):
            if not _ID_RE.match(value):
                return error_result(f"_meta.{label} may contain only letters, digits and _ . : - "
                              "(1-200 characters)")
        arguments = dict(params.arguments or {})
        found = jcs.problem(arguments, "arguments", text=False)
        if found is not None:  # NaN or Infinity: no JSON, no input_sha256
            return error_result(str(found))
        too_deep = depth_error(arguments, self.settings.max_input_depth, root="arguments")
        if too_deep is not None:  # as the REST submit refuses it: it cannot travel
            return error_result(too_deep)
        block = ToolUseBlock(id=tool_use_id, name=params.name, input=arguments)
        session = caller.session.for_turn(turn_id)
        if not meta.get(META_TOOL_USE_ID):
            # A model retrying gets a fresh id: attach to its still-parked twin.
            twin = await same_input_call(self.deps.repo, self.settings, caller.session, block)
            if twin is not None:
                block = block.model_copy(update={"id": twin})
                tool_use_id = twin
        try:
            await self.deps.repo.record_submission(
                session.session_id, [tool_use_id], caller.principal.key_id, caller.principal.name)
            await self.calls.start_call(block, session,
                                        declared.definitions(
                                            caller.session.client_tools,
                                            tool_classes.floor(self.settings, self.deps.registry)))
            if as_task:
                return await self.tasks.answer(ctx, caller, block, turn_id)
            if mcp_rounds.wanted(ctx):
                return await self._rounds(ctx, caller, block, turn_id)
            return await self._follow(ctx, caller, block, turn_id)
        except IdempotencyConflictError as exc:
            return error_result(f"_meta.tool_use_id {tool_use_id!r} already names another call "
                          f"({exc.existing_tool} with other input): {exc}", tool_use_id)
        except TEMPORAL_NO_ANSWER:
            return error_result(f"parkgate cannot reach Temporal right now; call again with "
                          f"_meta.tool_use_id={tool_use_id!r} (nothing runs twice)",
                          tool_use_id)

    def _named_call(self, ctx: ServerRequestContext[Any], caller: Caller,
                    params: types.CallToolRequestParams) -> mcp_rounds.NamedCall | None:
        """The call a 2026-07-28 retry's requestState names; a foreign state is refused."""
        if params.request_state is None or not mcp_tasks.is_modern(ctx):
            return None
        named = mcp_rounds.unseal(self.secret, params.request_state)
        if named is None or named.session_id != caller.session.session_id or (
                named.tool != params.name):
            raise MCPError(code=types.INVALID_PARAMS,
                           message="requestState was not issued by parkgate for this tool "
                           "in this session")
        return named

    async def _rounds(
        self, ctx: ServerRequestContext[Any], caller: Caller, block: ToolUseBlock, turn_id: str
    ) -> types.CallToolResult | types.InputRequiredResult:
        """2026-07-28 without tasks: a parked call answers `input_required` at once."""
        sid = caller.session.session_id
        # Until classified (fast, but slower under load): a parked call answers at once.
        resource = await self.calls.wait(sid, block.id, self.wait_seconds, turn_id=turn_id,
                                         classified=True)
        if resource is not None and resource.status == CallStatus.PARKED:
            return mcp_rounds.parked_answer(self.secret, self.tasks.inbox, block, turn_id,
                                            sid, resource)
        return await self._follow(ctx, caller, block, turn_id)

    async def _follow(
        self, ctx: ServerRequestContext[Any], caller: Caller, block: ToolUseBlock, turn_id: str
    ) -> types.CallToolResult:
        """Wait for the result, reporting progress, up to the configured wait."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        sid = caller.session.session_id
        tick = 0
        while True:
            step = max(0.0, min(self.progress_seconds, deadline - loop.time()))
            resource = await self.calls.wait(sid, block.id, step, turn_id=turn_id)
            if resource is not None and resource.finished:
                return finished_result(resource)
            if resource is not None and resource.status == CallStatus.RELEASED:
                return released_result(block, resource)
            url = await self._visible_link(caller.principal, resource)
            status = resource.status if resource is not None else CallStatus.QUEUED
            tick += 1
            await ctx.session.report_progress(float(tick), None,
                                              _status_line(block, status, resource, url))
            if loop.time() >= deadline:
                return _still_waiting(block, status, resource, url)

    async def _visible_link(
        self, principal: Principal, resource: CallResource | None
    ) -> str | None:
        """The approval link, only for a key that may decide the call."""
        if resource is None or resource.approval_url is None or resource.request_id is None:
            return None
        approval = await self.deps.repo.get_approval(resource.request_id)
        if approval is None:
            return None
        return link_for_principal(self.settings, self.secret, principal, approval,
                                  await submitter_of(self.deps.repo, approval))


class _Refused(Exception):
    """An HTTP-level refusal in parkgate's error shape."""

    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})
        if status == 401:
            self.headers["WWW-Authenticate"] = "Bearer"

    def response(self, scope: Scope, receive: Receive, send: Send) -> Any:
        body = {"error": {"code": self.code, "message": self.message, "details": None}}
        return JSONResponse(body, self.status, headers=self.headers)(scope, receive, send)


def _status_line(block: ToolUseBlock, status: CallStatus, resource: CallResource | None,
                 url: str | None) -> str:
    if status == CallStatus.PARKED:
        line = f"{block.name} ({block.id}) is parked, waiting for a human decision"
        if resource is not None and resource.expires_at is not None:
            line += f" until {resource.expires_at.isoformat()}"
        return line + (f"; approve or deny at {url}" if url else "")
    return f"{block.name} ({block.id}) is {status.value}"


def _still_waiting(block: ToolUseBlock, status: CallStatus, resource: CallResource | None,
                   url: str | None) -> types.CallToolResult:
    text = (f"{_status_line(block, status, resource, url)}. "
            + ("Nothing has run yet. " if status != CallStatus.RUNNING else "")
            + f"Call {block.name} again with _meta.tool_use_id = {block.id!r} "
            "to attach to this call and get its result (it will not run twice).")
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=True,
        meta=result_meta(block.id, status, approval_url=url),
    )
