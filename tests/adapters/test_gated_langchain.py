"""LangChain / LangGraph: the agent's own tools behind parkgate (client-executed),
in a LangGraph graph with a scripted chat model (no network), against the real
API, worker and Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from temporalio.client import Client

from parkgate.adapters.langchain import GatedTool, gated_tool_node, gated_tools
from parkgate.approvals.edits import NOTE_HEAD
from parkgate.store.repository import Repository
from tests.adapters.test_gated_pydantic_ai import clients
from tests.agent_client.test_gate import parked

RUNS: list[tuple[str, dict[str, Any]]] = []


@tool
def lookup(key: str) -> str:
    """Look a note up."""
    RUNS.append(("lookup", {"key": key}))
    return f"note {key}: buy milk"


async def write_note(key: str, text: str) -> str:
    """Write a note."""
    RUNS.append(("write_note", {"key": key, "text": text}))
    return f"wrote {key}"


def graph(tools: list[GatedTool] | ToolNode, calls: list[dict[str, Any]],
          seen: list[list[BaseMessage]], checkpointer: Any = None) -> Any:
    """model -> ToolNode -> model: the scripted model asks for `calls`, then says done;
    `seen` gets what the model was shown each turn."""
    model = FakeMessagesListChatModel(responses=[
        AIMessage(content="", tool_calls=calls), AIMessage(content="done")])

    async def call_model(state: MessagesState) -> dict[str, list[AIMessage]]:
        seen.append(list(state["messages"]))
        reply = await model.ainvoke(state["messages"])
        assert isinstance(reply, AIMessage)
        return {"messages": [reply]}

    g = StateGraph(MessagesState)
    g.add_node("model", call_model)
    g.add_node("tools", tools if isinstance(tools, ToolNode) else ToolNode(tools))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", tools_condition, ["tools", END])
    g.add_edge("tools", "model")
    return g.compile(checkpointer=checkpointer)


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_allowed_runs_once_a_write_runs_edited_after_approval_a_denial_never_runs(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    RUNS.clear()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        # The agent's existing ToolNode, its tools put behind the gate.
        tools = gated_tool_node(agent, sid, ToolNode([lookup, write_note]),
                                side_effects={"lookup": "read", "write_note": "write"},
                                workspace=str(api.workspace))
        seen: list[list[BaseMessage]] = []

        read = await graph(tools, [{"name": "lookup", "args": {"key": "k1"},
                                    "id": "lc_g_read_1"}], seen).ainvoke(
            {"messages": [HumanMessage("what is k1?")]})
        [msg] = tool_messages(read)
        assert msg.status == "success" and msg.content == "note k1: buy milk"
        assert RUNS == [("lookup", {"key": "k1"})]
        assert (await agent.get_call(sid, "lc_g_read_1")).status.value == "succeeded"

        run = asyncio.create_task(graph(tools, [{
            "name": "write_note", "args": {"key": "k2", "text": "call mom"},
            "id": "lc_g_write_1"}], seen).ainvoke({"messages": [HumanMessage("note it")]}))
        await parked(human, sid, "lc_g_write_1")
        assert len(RUNS) == 1
        await human.decide(sid, "lc_g_write_1", "allow_with_edits",
                           edited_input={"key": "k2", "text": "call mom at 6"})
        written = await asyncio.wait_for(run, 60)
        told = str(tool_messages(written)[0].content)  # the edit note, then the output
        assert told.startswith(NOTE_HEAD) and '- text: "call mom" -> "call mom at 6"' in told
        assert told.endswith("\nwrote k2")
        assert RUNS[-1] == ("write_note", {"key": "k2", "text": "call mom at 6"})

        run = asyncio.create_task(graph(tools, [{
            "name": "write_note", "args": {"key": "k3", "text": "x"},
            "id": "lc_g_deny_1"}], seen).ainvoke({"messages": [HumanMessage("note it")]}))
        await parked(human, sid, "lc_g_deny_1")
        await human.decide(sid, "lc_g_deny_1", "deny", reason="no notes after midnight")
        denied = await asyncio.wait_for(run, 60)
        [msg] = tool_messages(denied)
        assert msg.status == "error" and "no notes after midnight" in str(msg.content)
        assert len(RUNS) == 2  # the denied call never ran
        shown = seen[-1]  # the model's last turn saw the denial
        assert any(isinstance(m, ToolMessage) and "midnight" in str(m.content) for m in shown)


async def test_interrupt_pauses_the_graph_on_a_parked_call_and_resume_attaches(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    RUNS.clear()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        tools = gated_tools(agent, sid, [write_note], side_effects="write",
                            workspace=str(api.workspace), wait=0, interrupt=True)
        app = graph(tools, [{"name": "write_note", "args": {"key": "k", "text": "t"},
                             "id": "lc_g_int_1"}], [], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}
        paused = await app.ainvoke({"messages": [HumanMessage("note it")]}, config)
        [pending] = paused["__interrupt__"]
        assert pending.value["tool_use_id"] == "lc_g_int_1"
        assert pending.value["status"] == "parked" and RUNS == []

        await human.decide(sid, "lc_g_int_1", "allow")
        done = await app.ainvoke(Command(resume="decided"), config)
        assert tool_messages(done)[0].content == "wrote k"
        assert RUNS == [("write_note", {"key": "k", "text": "t"})]
