"""LangChain / LangGraph: tools whose calls go through parkgate
(`pip install parkgate[langchain]`). Works wherever LangChain tools run (a
LangGraph ToolNode, create_agent): invoked with the model's ToolCall, the
call's id is the parkgate tool_use_id, so a replayed conversation attaches."""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from typing import Any

from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict

from parkgate.agent_client import AsyncParkgateClient
from parkgate.models import ToolUseBlock

_CALL_ID: ContextVar[str | None] = ContextVar("parkgate_langchain_call_id", default=None)


class ParkgateTool(BaseTool):
    """One parkgate tool as a LangChain tool (async: use `ainvoke`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: AsyncParkgateClient
    session_id: str
    turn_id: str | None = None
    #: Bound on one call's wait for a decision; None waits until decided/expired.
    wait: float | None = None
    handle_tool_error: bool = True  # parkgate's error text goes back to the model

    async def arun(self, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CALL_ID.set(kwargs.get("tool_call_id"))
        try:
            return await super().arun(tool_input, *args, **kwargs)
        finally:
            _CALL_ID.reset(token)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("parkgate tools are async: use ainvoke")

    async def _arun(self, *args: Any, **kwargs: Any) -> str:
        kwargs.pop("run_manager", None)
        call_id = _CALL_ID.get() or f"lc_{uuid.uuid4().hex}"
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
        for d in definitions if names is None or d.name in names
    ]
