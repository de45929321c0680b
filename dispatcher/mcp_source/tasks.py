"""Following a downstream MCP server's task (the 2026-07-28 tasks extension, SEP-2663).

A server may answer parkgate's `tools/call` with a task instead of the result
(a long-running tool). parkgate declares the extension on its connections, takes
the task as it comes (`allow_claimed`), and polls `tasks/get` at the server's
interval until the task ends; a cancelled call cancels the task (`tasks/cancel`)
before the connection closes. The execute activity heartbeats meanwhile, as for
any tool.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: Poll bounds (s): a server's `pollIntervalMs` of 0 must not spin, nor a huge one stall.
MIN_POLL, MAX_POLL, DEFAULT_POLL = 0.05, 30.0, 1.0
#: How long a cancelled call waits for `tasks/cancel` to be answered.
CANCEL_SECONDS = 5.0


class _TaskFields(types.Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskCreated(_TaskFields):
    """A `tools/call` answered with a task (`resultType: "task"`)."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_TaskFields):
    """A `tasks/get` answer: the task, with its result or error once it ended."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskIdParams(types.RequestParams):
    task_id: str = Field(serialization_alias="taskId")


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams


async def _unused(created: TaskCreated, ctx: ClaimContext) -> types.CallToolResult:
    """Never called: parkgate takes the task as it comes and follows it itself."""
    return await follow(ctx.session, created)


class TasksClient(ClientExtension):
    """Declares the tasks extension so a server may answer with a task."""

    identifier = TASKS_EXTENSION

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        return (ResultClaim(result_type="task", model=TaskCreated, resolve=_unused,
                            protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS)),)


def _interval(ms: int | None) -> float:
    return DEFAULT_POLL if ms is None else min(MAX_POLL, max(MIN_POLL, ms / 1000))


async def follow(session: ClientSession, created: TaskCreated) -> types.CallToolResult:
    """Poll the task to its end; a cancelled caller cancels the task first."""
    task_id = created.task_id
    interval = _interval(created.poll_interval_ms)
    try:
        while True:
            state = await session.send_request(
                GetTask(params=TaskIdParams(task_id=task_id)), TaskState)
            if state.status in TERMINAL:
                return _ended(state)
            if state.status == "input_required":
                await _cancel(session, task_id)
                return _error(f"the MCP server's task {task_id} asks for input, "
                              "which parkgate cannot give it; the task was cancelled")
            interval = _interval(state.poll_interval_ms or created.poll_interval_ms)
            await asyncio.sleep(interval)
    except asyncio.CancelledError:
        await _cancel(session, task_id)
        raise


async def _cancel(session: ClientSession, task_id: str) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
        try:
            await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)),
                                       types.Result)
        except Exception:  # best effort: the connection closes next either way
            return


def _ended(state: TaskState) -> types.CallToolResult:
    if state.status == "completed":
        return types.CallToolResult.model_validate(state.result or {"content": []})
    if state.status == "cancelled":
        return _error(f"the MCP server cancelled task {state.task_id}"
                      + (f": {state.status_message}" if state.status_message else ""))
    message = (state.error or {}).get("message") or state.status_message or "task failed"
    return _error(str(message))


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
