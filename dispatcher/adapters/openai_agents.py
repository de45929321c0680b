"""OpenAI Agents SDK: function tools whose calls go through parkgate
(`pip install parkgate[openai-agents]`).

`needs_approval` is answered by parkgate's policy: the call is submitted (by
the model's call_id, so nothing runs twice) and, if parkgate parks it, the SDK
interrupts the run with a ToolApprovalItem. Decide the call in parkgate (its
approval link, or `decide` with an approver key), then `state.approve(item)`
and resume: the tool attaches to the call and returns parkgate's outcome (a
denial comes back as the error text the model reads).

`gated_function_tools` puts the agent's own FunctionTools behind the same gate
(client-executed: they run here, on release; docs/CLIENT_TOOLS.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from parkgate.agent_client import AsyncParkgateClient, AsyncToolGate, tool_gate
from parkgate.agent_client.client_tools import SideEffectsSpec, definition, side_effects_for
from parkgate.agent_client.edited import model_value
from parkgate.calls.records import CallStatus
from parkgate.models import ToolDefinition, ToolUseBlock

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
        # Client tools run in the agent: gate them with gated_* instead.
        for d in definitions if (names is None or d.name in names) and not d.client_executed
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


# ---------------------------------------------------------------- the agent's own tools
def gated_function_tools(
    client: AsyncParkgateClient, session_id: str, tools: Sequence[FunctionTool], *,
    side_effects: SideEffectsSpec, workspace: str | None = None, turn_id: str | None = None,
    wait: float | None = None, interrupt: bool = True,
) -> list[FunctionTool]:
    """The agent's own function tools behind parkgate (they run here, on release).

    Each tool keeps everything it had (schema, guardrails, error handling);
    its calls are submitted by the model's call_id and gated by parkgate's
    policy. With `interrupt` (default), `needs_approval` is parkgate's answer:
    a parked call interrupts the run like the hosted tools; decide it in
    parkgate, `state.approve(item)` and resume, and the call runs here once,
    with the released arguments (an approver's edit included). A denied or
    expired call never runs: the model reads "Error: <reason>".
    """
    gate = tool_gate(client, session_id, workspace, turn_id=turn_id)
    gated = []
    for tool in tools:
        gate.add(definition(tool.name, tool.description, tool.params_json_schema,
                            side_effects_for(tool.name, side_effects)))
        gated.append(replace(
            tool, on_invoke_tool=_gated_invoke(gate, tool, wait),
            needs_approval=_gated_needs_approval(gate, tool) if interrupt else False))
    return gated


def _gated_invoke(
    gate: AsyncToolGate, tool: FunctionTool, wait: float | None,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    original = tool.on_invoke_tool

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        ran: list[Any] = []

        async def execute(released: dict[str, Any]) -> Any:
            ran.append(await original(ctx, json.dumps(released)))
            return ran[-1]

        result = await gate.call(tool.name, json.loads(arguments or "{}"), execute,
                                 tool_use_id=ctx.tool_call_id, wait=wait)
        if result.is_error:
            return f"Error: {result.text}"
        # Ran here: the tool's own value, unless an approver edited its input
        # (then parkgate's text, which begins with the note saying so).
        return model_value(ran, result)

    return invoke


def _gated_needs_approval(
    gate: AsyncToolGate, tool: FunctionTool,
) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
    async def needs(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        resource = await gate.submit(tool.name, params, tool_use_id=call_id)
        return resource.status == CallStatus.PARKED

    return needs
