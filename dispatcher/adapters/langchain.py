"""LangChain / LangGraph: tools whose calls go through parkgate
(`pip install parkgate[langchain]`). Works wherever LangChain tools run (a
LangGraph ToolNode, create_agent): invoked with the model's ToolCall, the
call's id is the parkgate tool_use_id, so a replayed conversation attaches.

`gated_tools` puts the agent's own tools behind the same gate (client-executed:
they run here, on release; docs/CLIENT_TOOLS.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

from langchain_core.tools import BaseTool, ToolException
from langchain_core.tools import tool as lc_tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict
from pydantic_core import to_jsonable_python

from parkgate.agent_client import AsyncParkgateClient, AsyncToolGate, ParkedError, tool_gate
from parkgate.agent_client.client_tools import SideEffectsSpec, definition, side_effects_for
from parkgate.agent_client.edited import model_value
from parkgate.models import ToolUseBlock

_CALL_ID: ContextVar[str | None] = ContextVar("parkgate_langchain_call_id", default=None)


class _CalledById(BaseTool):
    """A tool whose call is submitted under the model's ToolCall id (`_call_id`
    inside `_arun`), so a replayed conversation attaches."""

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _CALL_ID.reset(token)


def _call_id() -> str:
    """The ToolCall id this run was invoked with (a fresh id without one)."""
    return _CALL_ID.get() or f"lc_{uuid.uuid4().hex}"


class ParkgateTool(_CalledById):
    """One parkgate tool as a LangChain tool (async: use `ainvoke`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: AsyncParkgateClient
    session_id: str
    turn_id: str | None = None
    #: Bound on one call's wait for a decision; None waits until decided/expired.
    wait: float | None = None
    handle_tool_error: bool = True  # parkgate's error text goes back to the model

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("parkgate tools are async: use ainvoke")

    async def _arun(self, *args: Any, **kwargs: Any) -> str:
        kwargs.pop("run_manager", None)
        call_id = _call_id()
        block = ToolUseBlock(id=call_id, name=self.name, input=kwargs)
        result = await self.client.dispatch(block, self.session_id, turn_id=self.turn_id,
                                            timeout=self.wait)
        if result.is_error:
            raise ToolException(result.text)
        return result.text


async def parkgate_tools(
    client: AsyncParkgateClient, session_id: str, *, turn_id: str | None = None,
    wait: float | None = None, names: list[str] | None = None,
) -> list[ParkgateTool]:
    """The session's parkgate tools as LangChain tools (bind them to a chat model)."""
    definitions = await client.get_definitions_for_session(session_id)
    return [
        ParkgateTool(name=d.name, description=d.description, args_schema=d.input_schema,
                     client=client, session_id=session_id, turn_id=turn_id, wait=wait)
        # Client tools run in the agent: gate them with gated_* instead.
        for d in definitions if (names is None or d.name in names) and not d.client_executed
    ]


# ---------------------------------------------------------------- the agent's own tools
class GatedTool(_CalledById):
    """One of the agent's own LangChain tools behind parkgate (async: `ainvoke`).

    Its call is submitted by the ToolCall's id and gated by parkgate's policy;
    on release the wrapped tool runs here, once, with the released arguments
    (an approver's edit included). A denied or expired call never runs: the
    ToolMessage is an error carrying the reason. A call still parked after
    `wait` raises ParkedError, or with `interrupt=True` calls LangGraph's
    `interrupt` (payload: tool_use_id, request_id, status, approval_url):
    resume the graph once decided in parkgate and the call attaches.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    tool_gate: AsyncToolGate
    wait: float | None = None
    interrupt: bool = False
    handle_tool_error: bool = True

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("gated tools are async: use ainvoke")

    async def _arun(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("run_manager", None)
        call_id = _call_id()
        tool_input = to_jsonable_python(kwargs)
        ran: list[Any] = []

        async def execute(released: dict[str, Any]) -> Any:
            ran.append(await self.inner.ainvoke(released))
            return ran[-1]

        try:
            result = await self.tool_gate.call(self.name, tool_input, execute,
                                               tool_use_id=call_id, wait=self.wait)
        except ParkedError as exc:
            if not self.interrupt:
                raise
            from langgraph.types import interrupt

            res = exc.resource
            interrupt({"tool_use_id": res.tool_use_id, "request_id": res.request_id,
                       "status": res.status.value, "approval_url": res.approval_url})
            # Resumed: parkgate's decision stands; attach and wait for it.
            result = await self.tool_gate.call(self.name, tool_input, execute,
                                               tool_use_id=call_id, wait=None)
        if result.is_error:
            raise ToolException(result.text)
        return model_value(ran, result)  # an approver's edit: the note first


def gated_tools(
    client: AsyncParkgateClient, session_id: str,
    tools: Sequence[BaseTool | Callable[..., Any]], *, side_effects: SideEffectsSpec,
    workspace: str | None = None, turn_id: str | None = None, wait: float | None = None,
    interrupt: bool = False,
) -> list[GatedTool]:
    """The agent's own tools (LangChain tools or plain functions) behind parkgate,
    for `bind_tools`, a LangGraph ToolNode or create_agent."""
    gate = tool_gate(client, session_id, workspace, turn_id=turn_id)
    gated = []
    for item in tools:
        inner = item if isinstance(item, BaseTool) else lc_tool(item)
        schema = convert_to_openai_tool(inner)["function"].get("parameters", {})
        gate.add(definition(inner.name, inner.description, schema,
                            side_effects_for(inner.name, side_effects)))
        gated.append(GatedTool(name=inner.name, description=inner.description,
                               args_schema=inner.args_schema, inner=inner, tool_gate=gate,
                               wait=wait, interrupt=interrupt))
    return gated


def gated_tool_node(
    client: AsyncParkgateClient, session_id: str, node: Any, *,
    side_effects: SideEffectsSpec, workspace: str | None = None, turn_id: str | None = None,
    wait: float | None = None, interrupt: bool = False,
) -> Any:
    """A LangGraph `ToolNode` whose tools are `node`'s, each behind parkgate
    (`pip install parkgate[langgraph]`); the graph around it stays as it is."""
    from langgraph.prebuilt import ToolNode

    tools = gated_tools(client, session_id, list(node.tools_by_name.values()),
                        side_effects=side_effects, workspace=workspace, turn_id=turn_id,
                        wait=wait, interrupt=interrupt)
    return ToolNode(tools, name=node.name)
