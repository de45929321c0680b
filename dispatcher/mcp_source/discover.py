"""Ask each configured MCP server for its tools and turn them into registry factories."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import mcp_types as types

from parkgate.mcp_source.config import McpServer
from parkgate.mcp_source.connect import open_session
from parkgate.mcp_source.tool import McpTool
from parkgate.models import TOOL_NAME_PATTERN, SideEffects, ToolDefinition
from parkgate.registry import Tool
from parkgate.schema import check_schema_subset

log = logging.getLogger(__name__)

_NAME_RE = re.compile(TOOL_NAME_PATTERN)
SEPARATOR = "__"


@dataclass(frozen=True)
class Skipped:
    """A tool (or a whole server, tool=None) left out, and why."""

    server: str
    tool: str | None
    reason: str


@dataclass
class Discovery:
    factories: list[Callable[[], Tool]] = field(default_factory=list)
    definitions: list[ToolDefinition] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def side_effects_of(tool: types.Tool, override: SideEffects | None = None) -> SideEffects:
    """The class from MCP hints (the most capable that applies); none -> EXECUTE."""
    if override is not None:
        return override
    hints = tool.annotations
    if hints is None:
        return SideEffects.EXECUTE
    if hints.open_world_hint:
        return SideEffects.NETWORK
    if hints.destructive_hint:
        return SideEffects.WRITE
    if hints.read_only_hint:
        return SideEffects.READ
    return SideEffects.EXECUTE


def definition_for(server_name: str, server: McpServer, tool: types.Tool) -> ToolDefinition:
    """The registry definition, or ValueError saying why the tool cannot join."""
    name = f"{server_name}{SEPARATOR}{tool.name}"
    if not _NAME_RE.match(name):
        raise ValueError(f"name {name!r} is not a valid tool name "
                         "(letters, digits, _ and -, at most 64 characters)")
    problems = check_schema_subset(tool.input_schema)
    if problems:
        raise ValueError("input schema outside the supported subset: " + "; ".join(problems))
    return ToolDefinition(
        name=name,
        description=tool.description or tool.title or f"{tool.name} (MCP server {server_name})",
        input_schema=dict(tool.input_schema),
        side_effects=side_effects_of(tool, server.side_effects.get(tool.name)),
        requires_workspace=False,
        timeout_seconds=server.timeout_seconds,
    )


async def discover(servers: Mapping[str, McpServer]) -> Discovery:
    """Every server's tools; a server that cannot be reached is skipped, not fatal."""
    found = Discovery()
    for server_name, server in servers.items():
        try:
            tools = await asyncio.wait_for(_list(server), server.connect_timeout_seconds)
        except Exception as exc:  # unreachable / crashed / timed out: skip it, say why
            found.skipped.append(Skipped(server_name, None, f"{type(exc).__name__}: {exc}"))
            continue
        for tool in tools:
            try:
                definition = definition_for(server_name, server, tool)
            except ValueError as exc:
                found.skipped.append(Skipped(server_name, tool.name, str(exc)))
                continue
            found.definitions.append(definition)
            found.factories.append(_factory(definition, server_name, server, tool.name))
    for s in found.skipped:
        log.warning("MCP server %s: skipped %s: %s", s.server, s.tool or "(server)", s.reason)
    return found


async def _list(server: McpServer) -> list[types.Tool]:
    tools: list[types.Tool] = []
    async with open_session(server) as session:
        cursor: str | None = None
        while True:
            page = await session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools


def _factory(definition: ToolDefinition, server_name: str, server: McpServer,
             remote: str) -> Callable[[], Tool]:
    def make() -> Tool:
        return McpTool(definition, server_name, server, remote)

    return make
