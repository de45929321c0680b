"""The LangChain adapter with a scripted chat model (no network) against the real
API, worker and Temporal dev server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from temporalio.client import Client

from parkgate.adapters.langchain import parkgate_tools
from parkgate.agent_client import AsyncParkgateClient, CallNotFinishedError
from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server


async def test_tool_calls_go_through_parkgate_with_the_models_ids(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), AsyncParkgateClient(base, api.key) as gate:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await gate.register_session(sid, str(api.workspace))
        (api.workspace / "a.txt").write_text("alpha")
        tools = {t.name: t for t in await parkgate_tools(gate, sid, turn_id="lc1")}
        assert {"read_file", "write_file"} <= set(tools)
        model = FakeMessagesListChatModel(responses=[AIMessage(content="", tool_calls=[
            {"name": "read_file", "args": {"path": "a.txt"}, "id": "lc_call_1"},
            {"name": "read_file", "args": {"path": "missing.txt"}, "id": "lc_call_2"},
        ])])
        reply = await model.ainvoke([HumanMessage("read a.txt")])
        assert isinstance(reply, AIMessage)
        messages = [await tools[c["name"]].ainvoke({**c, "type": "tool_call"})
                    for c in reply.tool_calls]
        assert all(isinstance(m, ToolMessage) for m in messages)
        ok, missing = messages
        assert ok.tool_call_id == "lc_call_1" and "alpha" in str(ok.content)
        assert ok.status == "success"
        assert missing.status == "error" and "missing.txt" in str(missing.content)
        row = await gate.get_call(sid, "lc_call_1")  # the model's id is parkgate's id
        assert row.status.value == "succeeded" and row.turn_id == "lc1"

        bounded = {t.name: t for t in await parkgate_tools(gate, sid, wait=1.0,
                                                           names=["write_file"])}
        with pytest.raises(CallNotFinishedError) as pending:  # parked for a human
            await bounded["write_file"].ainvoke({
                "name": "write_file", "args": {"path": "w.txt", "content": "w"},
                "id": "lc_call_3", "type": "tool_call"})
        assert pending.value.resource.tool_use_id == "lc_call_3"
        assert pending.value.resource.status.value == "parked"
        assert not (api.workspace / "w.txt").exists()


async def test_a_langgraph_agent_runs_its_tools_through_parkgate(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """A LangGraph graph (scripted model node -> prebuilt ToolNode -> model node):
    the ToolNode invokes parkgate's tools with the model's tool-call ids."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), AsyncParkgateClient(base, api.key) as gate:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await gate.register_session(sid, str(api.workspace))
        (api.workspace / "notes.txt").write_text("graph says hi")
        tools = await parkgate_tools(gate, sid, turn_id="lg1", names=["read_file"])
        model = FakeMessagesListChatModel(responses=[
            AIMessage(content="", tool_calls=[
                {"name": "read_file", "args": {"path": "notes.txt"}, "id": "lg_call_1"},
            ]),
            AIMessage(content="done"),
        ])

        async def call_model(state: MessagesState) -> dict[str, list[AIMessage]]:
            reply = await model.ainvoke(state["messages"])
            assert isinstance(reply, AIMessage)
            return {"messages": [reply]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition, ["tools", END])
        graph.add_edge("tools", "model")
        final = await graph.compile().ainvoke({"messages": [HumanMessage("read notes")]})

        tool_messages = [m for m in final["messages"] if isinstance(m, ToolMessage)]
        assert len(tool_messages) == 1
        assert tool_messages[0].tool_call_id == "lg_call_1"
        assert "graph says hi" in str(tool_messages[0].content)
        assert final["messages"][-1].content == "done"
        row = await gate.get_call(sid, "lg_call_1")
        assert row.status.value == "succeeded" and row.turn_id == "lg1"
