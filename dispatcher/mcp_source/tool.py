"""A registry tool that forwards one call to an MCP server."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import mcp_types as types

from parkgate.context import ToolContext
from parkgate.errors import ToolExecutionError
from parkgate.mcp_source.config import McpServer
from parkgate.mcp_source.connect import open_session
from parkgate.mcp_source.tasks import TaskCreated, follow
from parkgate.models import ImageBlock, ImageSource, TextBlock, ToolDefinition, ToolOutput


class McpTool:
    """Fresh per execution (registry rule); one connection per call, so a
    crashed server costs one call, not the worker."""

    def __init__(self, definition: ToolDefinition, server_name: str, server: McpServer,
                 remote_name: str) -> None:
        self.definition = definition
        self.server_name = server_name
        self.server = server
        self.remote_name = remote_name
        self._task: asyncio.Task[types.CallToolResult] | None = None

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        self._task = asyncio.create_task(self._call(input, context.tool_use_id))
        try:
            result = await self._task
        except Exception as exc:
            raise ToolExecutionError(
                f"MCP server {self.server_name!r} failed during {self.remote_name!r}: "
                f"{type(exc).__name__}: {_describe(exc)}", underlying=exc,
            ) from exc
        output = _output(result)
        if result.is_error:
            text = _text(output) or "the MCP tool reported an error"
            raise ToolExecutionError(f"{self.definition.name} failed: {text}")
        return output

    async def _call(self, input: dict[str, Any], tool_use_id: str) -> types.CallToolResult:
        async with open_session(self.server) as session:
            meta = cast(types.RequestParamsMeta, {"parkgate/tool_use_id": tool_use_id})
            result = await session.call_tool(self.remote_name, input, meta=meta,
                                             allow_claimed=True)
            if isinstance(result, TaskCreated):
                return await follow(session, result)
            if not isinstance(result, types.CallToolResult):
                raise ToolExecutionError(f"MCP server {self.server_name!r} answered "
                                         f"{self.remote_name!r} with {type(result).__name__}")
            return result

    async def cancel(self) -> bool:
        """Cancel the request: the SDK sends notifications/cancelled and closes
        the connection (a stdio server process is terminated)."""
        task = self._task
        if task is None or task.done():
            return True
        task.cancel()
        await asyncio.wait({task}, timeout=10)
        return task.done()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return str(exc) or "connection lost"


def _output(result: types.CallToolResult) -> ToolOutput:
    content: list[TextBlock | ImageBlock] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            content.append(TextBlock(text=block.text))
        elif isinstance(block, types.ImageContent):
            content.append(ImageBlock(source=ImageSource(data=block.data,
                                                         media_type=block.mime_type)))
        else:
            content.append(TextBlock(text=json.dumps(block.model_dump(mode="json",
                                                                      exclude_none=True))))
    if not content and result.structured_content is not None:
        content.append(TextBlock(text=json.dumps(result.structured_content)))
    return ToolOutput(content=content, success=not result.is_error)


def _text(output: ToolOutput) -> str:
    return "\n".join(b.text for b in output.content if isinstance(b, TextBlock))
