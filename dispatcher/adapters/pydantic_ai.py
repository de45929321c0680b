"""Pydantic AI: a toolset whose calls go through parkgate (`pip install parkgate[pydantic-ai]`).

The model's tool_call_id is the parkgate tool_use_id, so an agent that restarts
and replays its conversation re-dispatches the same ids and attaches to the
calls it made before (the tool runs once). A parked call either waits (the
default) or, with `defer=True`, surfaces as Pydantic AI's deferred tool request
carrying the status and (for a key that may decide) the approval link.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import FunctionToolset, RunContext, Tool
from pydantic_ai.exceptions import CallDeferred

from parkgate.agent_client import AsyncParkgateClient, CallNotFinishedError
from parkgate.models import ToolDefinition, ToolUseBlock


async def parkgate_toolset(
    client: AsyncParkgateClient,
    session_id: str,
    *,
    turn_id: str | None = None,
    wait: float | None = None,
    defer: bool = False,
    names: list[str] | None = None,
) -> FunctionToolset[Any]:
    """The session's parkgate tools as a Pydantic AI toolset.

    `wait` bounds how long one call waits for a decision (None: until decided
    or expired); when it passes, `defer=True` raises CallDeferred with
    metadata {tool_use_id, status, approval_url}, else CallNotFinishedError.
    """
    definitions = await client.get_definitions_for_session(session_id)
    chosen = [d for d in definitions if names is None or d.name in names]
    return FunctionToolset([
        Tool.from_schema(_caller(client, session_id, d, turn_id, wait, defer), name=d.name,
                         description=d.description, json_schema=d.input_schema, takes_ctx=True)
        for d in chosen
    ])


def _caller(
    client: AsyncParkgateClient, session_id: str, definition: ToolDefinition,
    turn_id: str | None, wait: float | None, defer: bool,
) -> Callable[..., Awaitable[str]]:
    async def call(ctx: RunContext[Any], **arguments: Any) -> str:
        if not ctx.tool_call_id:
            raise ValueError("parkgate needs the model's tool_call_id")
        block = ToolUseBlock(id=ctx.tool_call_id, name=definition.name, input=arguments)
        try:
            result = await client.dispatch(block, session_id, turn_id=turn_id, timeout=wait)
        except CallNotFinishedError as exc:
            if not defer:
                raise
            res = exc.resource
            raise CallDeferred(metadata={"tool_use_id": res.tool_use_id,
                                         "status": res.status.value,
                                         "approval_url": res.approval_url}) from exc
        # Errors are data: the model reads the same text parkgate would give it.
        return result.text if not result.is_error else f"Error: {result.text}"

    call.__name__ = definition.name
    return call
