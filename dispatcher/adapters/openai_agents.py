"""OpenAI Agents SDK: function tools whose calls go through parkgate
(`pip install parkgate[openai-agents]`).

`needs_approval` is answered by parkgate's policy: the call is submitted (by
the model's call_id, so nothing runs twice) and, if parkgate parks it, the SDK
interrupts the run with a ToolApprovalItem. Decide the call in parkgate (its
approval link, or `decide` with an approver key), then `state.approve(item)`
and resume: the tool attaches to the call and returns parkgate's outcome (a
denial comes back as the error text the model reads).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from parkgate.agent_client import AsyncParkgateClient
from parkgate.models import ToolDefinition, ToolUseBlock
from parkgate.records import CallStatus

#: How long `needs_approval` watches a fresh call for parkgate's verdict.
PROBE_SECONDS = 10.0


async def parkgate_function_tools(
    client: AsyncParkgateClient, session_id: str, *, turn_id: str | None = None,
    wait: float | None = None, names: list[str] | None = None,
) -> list[FunctionTool]:
    """The session's parkgate tools as Agents SDK function tools."""
    definitions = await client.get_definitions_for_session(session_id)
    return [
        FunctionTool(
            name=d.name,
            description=d.description,
            params_json_schema=d.input_schema,
            on_invoke_tool=_invoke(client, session_id, d, turn_id, wait),
            strict_json_schema=False,  # parkgate validates against the tool's own schema
            needs_approval=_needs_approval(client, session_id, d, turn_id),
        )
        for d in definitions if names is None or d.name in names
    ]


def _invoke(
    client: AsyncParkgateClient, session_id: str, definition: ToolDefinition,
    turn_id: str | None, wait: float | None,
) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        block = ToolUseBlock(id=ctx.tool_call_id, name=definition.name,
                             input=json.loads(arguments or "{}"))
        result = await client.dispatch(block, session_id, turn_id=turn_id, timeout=wait)
        return result.text if not result.is_error else f"Error: {result.text}"

    return invoke


def _needs_approval(
    client: AsyncParkgateClient, session_id: str, definition: ToolDefinition,
    turn_id: str | None,
) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
    async def needs(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        block = ToolUseBlock(id=call_id, name=definition.name, input=params)
        resource = await client.submit(block, session_id, turn_id=turn_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE_SECONDS
        while resource.status == CallStatus.QUEUED and loop.time() < deadline:
            await asyncio.sleep(0.05)
            resource = await client.get_call(session_id, call_id)
        return resource.status == CallStatus.PARKED

    return needs
