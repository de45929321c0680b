"""The OpenAI Agents SDK adapter with the SDK's ScriptedModel (no network)
against the real API, worker and Temporal dev server."""

from __future__ import annotations

import uuid
from pathlib import Path

from agents import Agent, RunConfig, Runner
from agents.testing.model import ScriptedModel, assistant_message, function_call
from temporalio.client import Client

from parkgate.adapters.openai_agents import parkgate_function_tools
from parkgate.agent_client import AsyncParkgateClient
from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server

OFFLINE = RunConfig(tracing_disabled=True)  # no trace export: nothing leaves the machine


async def test_policy_answers_needs_approval_and_the_call_runs_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), AsyncParkgateClient(base, api.key) as gate, \
            AsyncParkgateClient(base, api.human_key) as human:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await gate.register_session(sid, str(api.workspace))
        (api.workspace / "a.txt").write_text("alpha")
        tools = await parkgate_function_tools(gate, sid, turn_id="oa")

        reader = Agent(name="reader", tools=list(tools), model=ScriptedModel([
            [function_call("read_file", {"path": "a.txt"}, call_id="oa_read_1")],
            [assistant_message("read done")],
        ]))
        read = await Runner.run(reader, "read a.txt", run_config=OFFLINE)
        assert read.final_output == "read done" and not read.interruptions
        assert (await gate.get_call(sid, "oa_read_1")).status.value == "succeeded"

        model = ScriptedModel([
            [function_call("write_file", {"path": "w.txt", "content": "w\n"},
                           call_id="oa_write_1")],
            [assistant_message("write done")],
        ])
        writer = Agent(name="writer", tools=list(tools), model=model)
        first = await Runner.run(writer, "write w.txt", run_config=OFFLINE)
        call_ids = [getattr(i.raw_item, "call_id", None) for i in first.interruptions]
        assert call_ids == ["oa_write_1"]
        parked = await gate.get_call(sid, "oa_write_1")
        assert parked.status.value == "parked" and not (api.workspace / "w.txt").exists()

        await human.decide(sid, "oa_write_1", "allow")
        state = first.to_state()
        state.approve(first.interruptions[0])
        resumed = await Runner.run(writer, state, run_config=OFFLINE)
        assert resumed.final_output == "write done"
        assert (api.workspace / "w.txt").read_text() == "w\n"
        events = [e async for e in gate.events(sid, follow=False)]
        done = [e for e in events if e.tool_use_id == "oa_write_1" and e.type == "tool.completed"]
        assert len(done) == 1
