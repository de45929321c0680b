"""The Pydantic AI adapter with a scripted model (no network) against the real
API, worker and Temporal dev server; and the restartable example agent."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.client import Client

from parkgate.adapters.pydantic_ai import parkgate_toolset
from parkgate.agent_client import AsyncParkgateClient
from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server

ROOT = Path(__file__).resolve().parents[2]


def one_call(name: str, args: dict[str, Any], call_id: str) -> FunctionModel:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    return ModelResponse(parts=[TextPart(f"tool said: {part.content}")])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])

    return FunctionModel(reply)


async def test_calls_go_through_parkgate_and_a_parked_one_is_deferred(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), AsyncParkgateClient(base, api.key) as gate:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await gate.register_session(sid, str(api.workspace))
        (api.workspace / "a.txt").write_text("alpha")
        toolset = await parkgate_toolset(gate, sid)
        agent = Agent(one_call("read_file", {"path": "a.txt"}, "call_r1"), toolsets=[toolset])
        out = await agent.run("read it")
        assert "alpha" in str(out.output)
        row = await gate.get_call(sid, "call_r1")  # the model's id is parkgate's id
        assert row.status.value == "succeeded"

        deferring = await parkgate_toolset(gate, sid, wait=1.0, defer=True)
        writer = Agent(one_call("write_file", {"path": "w.txt", "content": "w"}, "call_w1"),
                       toolsets=[deferring], output_type=[str, DeferredToolRequests])
        deferred = await writer.run("write it")
        assert isinstance(deferred.output, DeferredToolRequests)
        assert [c.tool_call_id for c in deferred.output.calls] == ["call_w1"]
        meta = deferred.output.metadata["call_w1"]
        assert meta["status"] == "parked" and meta["approval_url"] is None  # agent's own gate
        assert not (api.workspace / "w.txt").exists()


async def test_an_agent_killed_while_parked_restarts_attaches_and_the_tool_runs_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        argv = [sys.executable, str(ROOT / "examples" / "restartable_agent.py"),
                "--url", base, "--key", api.key, "--session", sid,
                "--workspace", str(api.workspace), "--conversation", "conv-1"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        first = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        parked = await api.wait_parked(sid, "conv-1-write-1", timeout=60)
        assert first.returncode is None  # still waiting inside dispatch
        first.send_signal(signal.SIGKILL)
        assert await first.wait() == -signal.SIGKILL
        assert not (api.workspace / "report.txt").exists()

        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/conv-1/confirmations/{parked['request_id']}",
            json={"decision": "allow"})
        assert r.status_code == 200, r.text

        second = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(second.communicate(), 120)
        assert second.returncode == 0, err.decode()
        assert "done:" in out.decode() and "report.txt" in out.decode()
        assert (api.workspace / "report.txt").read_text() == "quarterly report\n"
        events = (await api.http.get(
            f"/v1/sessions/{sid}/tool-calls/conv-1-write-1/events")).json()["events"]
        types = [e["type"] for e in events]
        assert types.count("tool.completed") == 1 and types.count("tool.called") == 1
