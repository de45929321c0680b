"""Pydantic AI: the agent's own tools behind parkgate (client-executed), with a
scripted model (no network), against the real API, worker and Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from temporalio.client import Client

from parkgate.adapters.pydantic_ai import gated_toolset, parkgate_toolset
from parkgate.agent_client import AsyncParkgateClient
from parkgate.approvals.edits import NOTE_HEAD
from parkgate.store.repository import Repository
from tests.adapters.test_pydantic_ai import one_call
from tests.agent_client.test_gate import parked
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


class Notes:
    """The agent's own tools (they count their runs)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, str]]] = []

    def lookup(self, key: str) -> str:
        """Look a note up."""
        self.runs.append(("lookup", {"key": key}))
        return f"note {key}: buy milk"

    async def write_note(self, key: str, text: str) -> str:
        """Write a note."""
        self.runs.append(("write_note", {"key": key, "text": text}))
        return f"wrote {key}"


SIDE_EFFECTS = {"lookup": "read", "write_note": "write"}


@asynccontextmanager
async def clients(client: Client, repo: Repository, tmp_path: Path,
                  ) -> AsyncIterator[tuple[ApiRig, AsyncParkgateClient, AsyncParkgateClient]]:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        yield api, agent, human


async def test_allowed_runs_once_a_write_runs_edited_after_approval_a_denial_never_runs(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    notes = Notes()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        toolset = gated_toolset(agent, sid, [notes.lookup, notes.write_note],
                                side_effects=SIDE_EFFECTS, workspace=str(api.workspace))

        reader = Agent(one_call("lookup", {"key": "k1"}, "pa_read_1"), toolsets=[toolset])
        out = await reader.run("what is k1?")
        assert out.output == "tool said: note k1: buy milk"
        assert notes.runs == [("lookup", {"key": "k1"})]
        assert (await agent.get_call(sid, "pa_read_1")).status.value == "succeeded"
        hosted = await parkgate_toolset(agent, sid)  # the hosted mode leaves them out
        assert "read_file" in hosted.tools and "lookup" not in hosted.tools

        writer = Agent(one_call("write_note", {"key": "k2", "text": "call mom"}, "pa_write_1"),
                       toolsets=[toolset])
        run = asyncio.create_task(writer.run("note it"))
        await parked(human, sid, "pa_write_1")
        assert len(notes.runs) == 1  # parked: not run
        await human.decide(sid, "pa_write_1", "allow_with_edits",
                           edited_input={"key": "k2", "text": "call mom at 6"})
        written = await asyncio.wait_for(run, 60)
        # The model reads that an approver changed its input, then the output.
        assert written.output.startswith(f"tool said: {NOTE_HEAD}")
        assert '- text: "call mom" -> "call mom at 6"' in written.output
        assert written.output.endswith("\nwrote k2")
        assert notes.runs[-1] == ("write_note", {"key": "k2", "text": "call mom at 6"})

        denied = Agent(one_call("write_note", {"key": "k3", "text": "x"}, "pa_write_2"),
                       toolsets=[toolset])
        run = asyncio.create_task(denied.run("note it"))
        await parked(human, sid, "pa_write_2")
        await human.decide(sid, "pa_write_2", "deny", reason="no notes after midnight")
        refused = await asyncio.wait_for(run, 60)
        assert "Error:" in refused.output and "no notes after midnight" in refused.output
        assert len(notes.runs) == 2  # the denied call never ran


async def test_defer_surfaces_a_parked_call_as_an_approval_and_resumes_it(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    notes = Notes()
    async with clients(dev_temporal, sqlite_repo, tmp_path) as (api, agent, human):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        toolset = gated_toolset(agent, sid, [notes.write_note], side_effects="write",
                                workspace=str(api.workspace), wait=0, defer=True)
        writer = Agent(one_call("write_note", {"key": "k", "text": "t"}, "pa_defer_1"),
                       toolsets=[toolset], output_type=[str, DeferredToolRequests])
        first = await writer.run("note it")
        assert isinstance(first.output, DeferredToolRequests)
        assert [c.tool_call_id for c in first.output.approvals] == ["pa_defer_1"]
        meta = first.output.metadata["pa_defer_1"]
        assert meta["status"] == "parked" and meta["request_id"] and notes.runs == []

        await human.decide(sid, "pa_defer_1", "allow")
        resumed = await writer.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"pa_defer_1": True}))
        assert resumed.output == "tool said: wrote k"
        assert notes.runs == [("write_note", {"key": "k", "text": "t"})]
