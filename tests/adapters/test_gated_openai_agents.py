"""OpenAI Agents SDK: the agent's own FunctionTools behind parkgate
(client-executed), with the SDK's ScriptedModel (no network), against the real
API, worker and Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from agents import Agent, Runner, function_tool
from agents.testing.model import ScriptedModel, assistant_message, function_call
from temporalio.client import Client

from parkgate.adapters.openai_agents import gated_function_tools
from parkgate.approvals.edits import NOTE_HEAD
from parkgate.store.repository import Repository
from tests.adapters.test_gated_pydantic_ai import clients
from tests.adapters.test_openai_agents import OFFLINE
from tests.agent_client.test_gate import parked

RUNS: list[tuple[str, dict[str, object]]] = []


@function_tool
def lookup(key: str) -> str:
    """Look a note up."""
    RUNS.append(("lookup", {"key": key}))
    return f"note {key}: buy milk"


@function_tool
async def write_note(key: str, text: str) -> str:
    """Write a note."""
    RUNS.append(("write_note", {"key": key, "text": text}))
    return f"wrote {key}"


SIDE_EFFECTS = {"lookup": "read", "write_note": "write"}


async def test_allowed_runs_once_and_a_parked_write_interrupts_then_runs_edited(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    RUNS.clear()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        tools = gated_function_tools(agent, sid, [lookup, write_note],
                                     side_effects=SIDE_EFFECTS, workspace=str(api.workspace))

        reader = Agent(name="reader", tools=list(tools), model=ScriptedModel([
            [function_call("lookup", {"key": "k1"}, call_id="oa_g_read_1")],
            [assistant_message("read done")],
        ]))
        read = await Runner.run(reader, "what is k1?", run_config=OFFLINE)
        assert read.final_output == "read done" and not read.interruptions
        assert RUNS == [("lookup", {"key": "k1"})]
        assert (await agent.get_call(sid, "oa_g_read_1")).status.value == "succeeded"

        model = ScriptedModel([
            [function_call("write_note", {"key": "k2", "text": "call mom"},
                           call_id="oa_g_write_1")],
            [assistant_message("write done")],
        ])
        writer = Agent(name="writer", tools=list(tools), model=model)
        first = await Runner.run(writer, "note it", run_config=OFFLINE)
        assert [getattr(i.raw_item, "call_id", None) for i in first.interruptions] == [
            "oa_g_write_1"]
        assert (await human.get_call(sid, "oa_g_write_1")).status.value == "parked"
        assert len(RUNS) == 1

        await human.decide(sid, "oa_g_write_1", "allow_with_edits",
                           edited_input={"key": "k2", "text": "call mom at 6"})
        state = first.to_state()
        state.approve(first.interruptions[0])
        resumed = await Runner.run(writer, state, run_config=OFFLINE)
        assert resumed.final_output == "write done"
        assert RUNS[-1] == ("write_note", {"key": "k2", "text": "call mom at 6"})
        assert model.last_call is not None and "wrote k2" in str(model.last_call.input)
        told = [i["output"] for i in model.last_call.input  # type: ignore[union-attr]
                if isinstance(i, dict) and i.get("type") == "function_call_output"][-1]
        assert str(told).startswith(NOTE_HEAD)  # told its input was changed, then the output
        assert '- text: "call mom" -> "call mom at 6"' in str(told)


async def test_a_denied_call_never_runs_and_the_model_reads_the_reason(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    RUNS.clear()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        # Without `interrupt`, the tool waits inside the run for parkgate's decision.
        tools = gated_function_tools(agent, sid, [write_note], side_effects="write",
                                     workspace=str(api.workspace), interrupt=False)
        model = ScriptedModel([
            [function_call("write_note", {"key": "k", "text": "x"}, call_id="oa_g_deny_1")],
            [assistant_message("ok")],
        ])
        run = asyncio.create_task(Runner.run(Agent(name="w", tools=tools, model=model),
                                             "note it", run_config=OFFLINE))
        await parked(human, sid, "oa_g_deny_1")
        await human.decide(sid, "oa_g_deny_1", "deny", reason="no notes after midnight")
        result = await asyncio.wait_for(run, 60)
        assert result.final_output == "ok" and RUNS == []
        assert model.last_call is not None
        assert "no notes after midnight" in str(model.last_call.input)
