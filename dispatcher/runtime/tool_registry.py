"""The tools a deployment serves: built-in, composed, and its MCP servers' tools.

Workers build their pipeline over this registry; `parkgate api` needs only the
definitions, so it builds the registry alone, without the worker's recipe
(activities, workflows, policy, Cedar, sandbox). The MCP SDK is imported only
when `mcp_servers` is configured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parkgate.registry import ToolFactory, ToolRegistry
    from parkgate.settings import Settings


def build_registry(extra_tools: Iterable[ToolFactory] = ()) -> ToolRegistry:
    """The registry every worker (and the API, for definitions) uses.

    The built-in tools, then the built-in composed tools (atomic_edit,
    atomic_edit_checked: their sub-tools must be registered first), then
    `extra_tools` in order (tests and embedders add theirs here).
    """
    from parkgate.registry import ToolRegistry
    from parkgate.tools import builtin_tools, composed_tools

    registry = ToolRegistry()
    for factory in [*builtin_tools(), *composed_tools()]:
        registry.register(factory, own=True)  # their schemas: tests/dispatcher/test_schema.py
    for factory in extra_tools:
        registry.register(factory)
    return registry


async def mcp_tools(settings: Settings) -> list[ToolFactory]:
    """The configured MCP servers' tools (none, and no MCP import, without servers)."""
    if not settings.mcp_servers:
        return []
    from parkgate.mcp_source.discover import discover

    return list((await discover(settings.mcp_servers)).factories)


async def tool_registry(settings: Settings) -> ToolRegistry:
    """The deployment's registry: built-in tools plus its MCP servers' tools."""
    return build_registry(await mcp_tools(settings))
