"""Pydantic AI: a toolset whose calls go through parkgate (`pip install parkgate[pydantic-ai]`).

The model's tool_call_id is the parkgate tool_use_id, so an agent that restarts
and replays its conversation re-dispatches the same ids and attaches to the
calls it made before (the tool runs once). A parked call either waits (the
default) or, with `defer=True`, surfaces as Pydantic AI's deferred tool request
carrying the status and (for a key that may decide) the approval link.

`gated_toolset` does the same for the agent's own tools (client-executed:
they run here, on release; docs/CLIENT_TOOLS.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import FunctionToolset, RunContext, Tool
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import to_jsonable_python

from parkgate.agent_client import (
    AsyncParkgateClient,
    AsyncToolGate,
    CallNotFinishedError,
    ParkedError,
    tool_gate,
)
from parkgate.agent_client.client_tools import SideEffectsSpec, definition, side_effects_for
from parkgate.agent_client.edited import model_value
from parkgate.models import SideEffects, ToolDefinition, ToolUseBlock


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
    # Client tools run in the agent: gate them with gated_toolset instead.
    chosen = [d for d in definitions
              if (names is None or d.name in names) and not d.client_executed]
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


# ---------------------------------------------------------------- the agent's own tools
@dataclass
class GatedToolset(WrapperToolset[Any]):
    """The agent's own toolset behind parkgate: each call is submitted by the
    model's tool_call_id, decided by parkgate's policy (or a human), and on
    release runs here, once, with the released arguments (an approver's edit
    included), re-validated by the tool's own validator.

    A denied or expired call never runs: the model reads "Error: <reason>".
    With `defer=True`, a call still parked after `wait` seconds raises
    Pydantic AI's ApprovalRequired (metadata: tool_use_id, request_id, status,
    approval_url); resume with `DeferredToolResults(approvals={id: True})` once
    decided in parkgate: the call attaches and runs if parkgate released it.
    """

    tool_gate: AsyncToolGate | None = None
    side_effects: SideEffectsSpec = SideEffects.WRITE
    wait: float | None = None
    defer: bool = False

    def _gate(self) -> AsyncToolGate:
        if self.tool_gate is None:
            raise RuntimeError("GatedToolset needs a tool_gate (use gated_toolset)")
        return self.tool_gate

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        for name, tool in tools.items():
            self._gate().add(definition(
                name, tool.tool_def.description or name, tool.tool_def.parameters_json_schema,
                side_effects_for(name, self.side_effects)))
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any],
    ) -> Any:
        if not ctx.tool_call_id:
            raise ValueError("parkgate needs the model's tool_call_id")
        ran: list[Any] = []

        async def execute(released: dict[str, Any]) -> Any:
            args = tool.args_validator.validate_python(released)  # the edit is re-validated
            ran.append(await self.wrapped.call_tool(name, args, ctx, tool))
            return ran[-1]

        # A call the user approved in a resumed run waits for parkgate's decision.
        wait = None if ctx.tool_call_approved else self.wait
        try:
            result = await self._gate().call(name, to_jsonable_python(tool_args), execute,
                                              tool_use_id=ctx.tool_call_id, wait=wait)
        except ParkedError as exc:
            if not self.defer:
                raise
            res = exc.resource
            raise ApprovalRequired(metadata={
                "tool_use_id": res.tool_use_id, "request_id": res.request_id,
                "status": res.status.value, "approval_url": res.approval_url}) from exc
        if result.is_error:
            return f"Error: {result.text}"
        # Ran here: the tool's own value, unless an approver edited its input
        # (then parkgate's text, which begins with the note saying so).
        return model_value(ran, result)


def gated_toolset(
    client: AsyncParkgateClient,
    session_id: str,
    tools: AbstractToolset[Any] | Sequence[Tool[Any] | Callable[..., Any]],
    *,
    side_effects: SideEffectsSpec,
    workspace: str | None = None,
    turn_id: str | None = None,
    wait: float | None = None,
    defer: bool = False,
) -> GatedToolset:
    """Put the agent's own tools (a toolset, or functions / `Tool`s) behind parkgate.

    `side_effects` is one class for all of them or a mapping by tool name.
    The session is registered with these tools as client tools (workspace:
    default the current directory) before its first call.
    """
    wrapped = tools if isinstance(tools, AbstractToolset) else FunctionToolset(list(tools))
    return GatedToolset(wrapped=wrapped,
                        tool_gate=tool_gate(client, session_id, workspace, turn_id=turn_id),
                        side_effects=side_effects, wait=wait, defer=defer)
