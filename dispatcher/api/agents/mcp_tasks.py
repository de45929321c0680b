"""Parked calls as MCP tasks: answer a tools/call at once, let the client poll.

A held request lasts minutes; an approval may take hours. A client that asks
for a task (protocol 2025-11-25: `tools/call` with `task: {ttl}`; protocol
2026-07-28: the `io.modelcontextprotocol/tasks` extension (SEP-2663) declared
in the request's client capabilities) gets one as soon as its call is parked,
queued or still running after `mcp_task_wait_seconds`; a call that finished by
then is answered directly, as without tasks.

The task id names the call: `call/<session_id>/<tool_use_id>`, its workflow
id. Nothing about a task lives in this process: `tasks/get` reads the call's
record (store and workflow, as the /v1 API does), so a task outlives client
disconnects and `parkgate serve` restarts. The endpoint's path binds a request
to one session of the key's project, and a task id of another session is
answered exactly like an unknown one.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from parkgate.api.agents.mcp_common import Caller, caller_of, finished_result, released_result
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.schemas import ID_RE, CallResource, call_resource
from parkgate.api.shared.service import CallService
from parkgate.approvals.access import Role
from parkgate.calls.cancellation import VIA_MCP, Cancellation
from parkgate.calls.records import CallStatus
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER
from parkgate.models import ToolUseBlock
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters

#: The tasks extension (SEP-2663) of protocol 2026-07-28.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: `_meta` key that ties a `tasks/result` answer to its task (2025-11-25).
RELATED_TASK = "io.modelcontextprotocol/related-task"
#: The JSON-RPC error a failed task carries: the call ended with an error result.
TOOL_CALL_FAILED = -32001
#: What a 2025-11-25 server advertises at initialize for task-augmented tools/call.
LEGACY_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {},
                                     "requests": {"tools": {"call": {}}}}
#: Largest `ttl` a client may ask for (ms): about ten years.
MAX_TTL_MS = 10 * 366 * 24 * 3600 * 1000
#: How long tasks/cancel waits for the call to end before answering.
CANCEL_WAIT_SECONDS = 10.0
LIST_PAGE = 50
#: How much of an unknown task id a not-found message repeats.
SHOWN_ID = 300
_ID = re.compile(ID_RE)


class LegacyTaskCreated(Exception):
    """A 2025-11-25 `CreateTaskResult` for a tools/call.

    The SDK checks a 2025-11-25 tools/call result against `CallToolResult`,
    which a task is not; the handler raises this and `middleware` answers it."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__("task created")
        self.payload = payload


def task_id(session_id: str, tool_use_id: str) -> str:
    return f"call/{session_id}/{tool_use_id}"


def is_modern(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def declared(ctx: ServerRequestContext[Any]) -> bool:
    """Whether a 2026-07-28 request's client capabilities name the tasks extension."""
    caps = dict(ctx.meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY)
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def require_declared(ctx: ServerRequestContext[Any]) -> None:
    """SEP-2663: a 2026-07-28 tasks/* request without the extension is -32021."""
    if is_modern(ctx) and not declared(ctx):
        raise MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                       message=f"tasks/* needs the tasks extension ({TASKS_EXTENSION}) in "
                       "this request's client capabilities",
                       data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})


def requested(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> bool:
    """Whether this tools/call asked for a task; a bad `ttl` is the client's error."""
    if is_modern(ctx):
        return declared(ctx)
    if params.task is None:
        return False
    ttl = params.task.ttl
    if ttl is not None and not 0 <= ttl <= MAX_TTL_MS:
        raise MCPError(code=types.INVALID_PARAMS,
                       message=f"task.ttl must be between 0 and {MAX_TTL_MS} ms, got {ttl}")
    return True


def _iso(value: datetime | None) -> str:
    return (value or datetime.now(UTC)).isoformat()


class McpTasks:
    """The task side of the MCP endpoint: create, get, result, list, cancel."""

    def __init__(self, settings: Settings, repo: Repository, calls: CallService) -> None:
        self.repo, self.calls = repo, calls
        self.wait_seconds = settings.mcp_task_wait_seconds
        self.poll_ms = int(settings.mcp_task_poll_seconds * 1000)
        self.hold_seconds = max(settings.mcp_call_wait_seconds, 1.0)
        self.inbox = f"{settings.public_base_url.rstrip('/')}/inbox"

    def install(self, server: Server[Any]) -> None:
        """Serve the tasks/* methods and advertise tasks (both protocol versions)."""
        server.extensions[TASKS_EXTENSION] = {}
        server.middleware.append(self.middleware)
        server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.get)
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams,
                                   self.result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.list)
        server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.cancel)

    async def middleware(self, ctx: ServerRequestContext[Any], call_next: CallNext
                         ) -> HandlerResult:
        """Answer a 2025-11-25 task creation; advertise tasks at a 2025-11-25 initialize."""
        try:
            result = await call_next(ctx)
        except LegacyTaskCreated as created:
            return created.payload
        if ctx.method == "initialize" and isinstance(result, dict) and (
                result.get("protocolVersion") == "2025-11-25"):
            result.setdefault("capabilities", {})["tasks"] = LEGACY_CAPABILITY
        return result

    # ------------------------------------------------------------ creation
    async def answer(self, ctx: ServerRequestContext[Any], caller: Caller, block: ToolUseBlock,
                     turn_id: str) -> types.CallToolResult | dict[str, Any]:
        """A started call's answer: its result if it ends within the short wait, else a task."""
        sid = caller.session.session_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        try:
            resource = await self.calls.wait(sid, block.id, self.wait_seconds,
                                             turn_id=turn_id, classified=True)
            if resource is not None and resource.status in (CallStatus.QUEUED,
                                                            CallStatus.RUNNING):
                resource = await self.calls.wait(
                    sid, block.id, max(0.0, deadline - loop.time()), turn_id=turn_id)
        except TEMPORAL_NO_ANSWER:
            resource = None  # the call has started: its task answers once Temporal does
        if resource is not None and resource.finished:
            return finished_result(resource)
        if resource is not None and resource.status == CallStatus.RELEASED:
            return released_result(block, resource)
        task = self._task(sid, block.id, block.name, resource)
        if not is_modern(ctx):
            raise LegacyTaskCreated({"task": self._legacy(task)})
        return {**self._modern(task), "resultType": "task"}

    # ------------------------------------------------------------- methods
    async def get(self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams
                  ) -> dict[str, Any]:
        require_declared(ctx)
        caller = caller_of(ctx)
        tool_use_id, resource = await self._find(caller, params.task_id)
        task = self._task(caller.session.session_id, tool_use_id, resource.tool_name, resource)
        if not is_modern(ctx):
            return self._legacy(task)
        out = {**self._modern(task), "resultType": "complete"}
        if resource.finished and resource.status != CallStatus.CANCELLED:
            result = finished_result(resource)
            if task["status"] == "completed":
                out["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            else:
                out["error"] = {"code": TOOL_CALL_FAILED, "message": task["statusMessage"],
                                "data": {"tool_use_id": tool_use_id,
                                         "status": resource.status.value,
                                         "error_class": resource.error_class}}
        elif resource.status == CallStatus.RELEASED:
            out["result"] = released_result(
                ToolUseBlock(id=tool_use_id, name=resource.tool_name or "tool", input={}),
                resource).model_dump(by_alias=True, mode="json", exclude_none=True)
        return out

    async def result(self, ctx: ServerRequestContext[Any],
                     params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        """2025-11-25 `tasks/result`: waits for the call to end, then its tool result."""
        caller = caller_of(ctx)
        sid = caller.session.session_id
        tool_use_id, resource = await self._find(caller, params.task_id)
        while not resource.finished and resource.status != CallStatus.RELEASED:
            found = await self.calls.wait(sid, tool_use_id, self.hold_seconds)
            resource = found or resource
        if resource.status == CallStatus.RELEASED:
            block = ToolUseBlock(id=tool_use_id, name=resource.tool_name or "tool", input={})
            answer = released_result(block, resource)
        else:
            answer = finished_result(resource)
        answer.meta = {**(answer.meta or {}), RELATED_TASK: {"taskId": params.task_id}}
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def list(self, ctx: ServerRequestContext[Any],
                   params: types.PaginatedRequestParams) -> dict[str, Any]:
        """The session's calls as tasks, newest first."""
        caller = caller_of(ctx)
        sid = caller.session.session_id
        try:
            page = await self.repo.list_calls(CallFilters(session_id=sid), limit=LIST_PAGE,
                                              cursor=params.cursor)
        except ValueError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=f"bad cursor: {exc}") from None
        tasks = []
        for row in page.items:
            resource = call_resource(row)
            task = self._task(sid, row.tool_use_id, resource.tool_name, resource)
            tasks.append(self._legacy(task) if not is_modern(ctx) else self._modern(task))
        out: dict[str, Any] = {"tasks": tasks}
        if page.next_cursor:
            out["nextCursor"] = page.next_cursor
        return out

    async def cancel(self, ctx: ServerRequestContext[Any],
                     params: types.CancelTaskRequestParams) -> dict[str, Any]:
        """Cancel the call as `parkgate cancel` does; a parked call ends without running."""
        require_declared(ctx)
        caller = caller_of(ctx)
        if not caller.principal.has(Role.AGENT):
            raise MCPError(code=types.INVALID_REQUEST,
                           message=f"API key {caller.principal.name!r} lacks the agent role: "
                           "it may read tasks but not cancel them")
        sid = caller.session.session_id
        tool_use_id, resource = await self._find(caller, params.task_id)
        if resource.finished:
            if is_modern(ctx):
                return {}
            raise MCPError(code=types.INVALID_PARAMS,
                           message=f"task {params.task_id!r} already ended "
                           f"({resource.status.value}); a finished task cannot be cancelled")
        try:
            await self.calls.cancel(sid, tool_use_id, Cancellation(
                by=caller.principal.label, via=VIA_MCP))
        except ApiError:
            raise self._not_found(params.task_id) from None
        ended = await self.calls.wait(sid, tool_use_id, CANCEL_WAIT_SECONDS)
        if is_modern(ctx):
            return {}
        resource = ended or resource
        return self._legacy(self._task(sid, tool_use_id, resource.tool_name, resource))

    # ------------------------------------------------------------- shaping
    async def _find(self, caller: Caller, tid: str) -> tuple[str, CallResource]:
        """The task's call in the caller's session, or not-found (never another session's)."""
        sid = caller.session.session_id
        prefix = f"call/{sid}/"
        tool_use_id = tid[len(prefix):] if tid.startswith(prefix) else ""
        if not _ID.match(tool_use_id):
            raise self._not_found(tid)
        try:
            resource = await self.calls.resource(sid, tool_use_id)
        except TEMPORAL_NO_ANSWER:
            # A live call's workflow did not answer (load, a restart): its stored row will do.
            row = await self.repo.get_call(sid, tool_use_id)
            if row is None:
                raise MCPError(code=types.INTERNAL_ERROR,
                               message="parkgate cannot reach Temporal right now; "
                               "ask again (the task is intact)") from None
            resource = call_resource(row)
        if resource is None:
            raise self._not_found(tid)
        return tool_use_id, resource

    @staticmethod
    def _not_found(tid: str) -> MCPError:
        shown = tid if len(tid) <= SHOWN_ID else tid[:SHOWN_ID] + "..."  # never echo a flood
        return MCPError(code=types.INVALID_PARAMS, message=f"task {shown!r} not found")

    def _task(self, sid: str, tool_use_id: str, name: str | None,
              resource: CallResource | None) -> dict[str, Any]:
        """The task's fields, shared by both protocol versions' shapes."""
        status = resource.status if resource is not None else CallStatus.QUEUED
        label = f"{name or 'the tool'} ({tool_use_id})"
        if resource is not None and resource.finished:
            state = ("cancelled" if status == CallStatus.CANCELLED
                     else "failed" if resource.result is None or resource.result.is_error
                     else "completed")
            text = "; ".join(b.text for b in (resource.result.content if resource.result else [])
                             if hasattr(b, "text"))
            message = f"{label} {status.value}" + (f": {text[:1000]}" if text else "")
        elif status == CallStatus.RELEASED:
            state, message = "completed", f"{label} is approved and released to its client"
        else:
            state, message = "working", self._working(label, status, resource)
        return {
            "taskId": task_id(sid, tool_use_id),
            "status": state,
            "statusMessage": message,
            "createdAt": _iso(resource.created_at if resource else None),
            "lastUpdatedAt": _iso(None if resource is None else (
                resource.finished_at or resource.started_at or resource.created_at)),
        }

    def _working(self, label: str, status: CallStatus, resource: CallResource | None) -> str:
        if status == CallStatus.PARKED and resource is not None:
            line = f"{label} is parked for approval"
            if resource.request_id:
                line += f" (request {resource.request_id})"
            if resource.expires_at is not None:
                line += f" until {resource.expires_at.isoformat()}"
            return (line + f"; a person decides it in the inbox at {self.inbox}. "
                    "Nothing has run yet.")
        if status == CallStatus.RUNNING:
            return f"{label} is running"
        if status == CallStatus.CLAIMED:
            return f"{label} is claimed by its client, which runs it"
        return f"{label} is queued: parkgate is deciding whether it may run"

    def _legacy(self, task: dict[str, Any]) -> dict[str, Any]:
        return {**task, "ttl": None, "pollInterval": self.poll_ms}

    def _modern(self, task: dict[str, Any]) -> dict[str, Any]:
        return {**task, "ttlMs": None, "pollIntervalMs": self.poll_ms}
