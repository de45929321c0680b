"""An MCP server that answers parkgate's call with a task (a FastMCP server with
fastmcp-tasks' extension, tests/mcp_source/task_server.py, over stdio): the call
follows the task to its result or error, and a cancelled call cancels the task."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.client import Client

from parkgate.mcp_source.config import McpServer
from parkgate.mcp_source.discover import discover
from parkgate.store.repository import Repository
from tests.api.rig import api_rig

SERVER = str(Path(__file__).with_name("task_server.py"))


def task_server(tmp_path: Path) -> McpServer:
    return McpServer(command=[sys.executable, SERVER],
                     env={"MARK_FILE": str(tmp_path / "marks.txt")})


def marks(tmp_path: Path) -> list[str]:
    path = tmp_path / "marks.txt"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_tasked_tool_is_followed_to_its_result_and_its_error(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    found = await discover({"jobs": task_server(tmp_path)})
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, extra_tools=found.factories) as api:
        sid = await api.register()
        r = await api.submit(sid, "jobs__slow_sum", {"a": 2, "b": 3}, call_id="toolu_s", wait=60)
        body = r.json()
        assert body["status"] == "succeeded", body
        assert "sum=5" in body["result"]["content"][0]["text"]
        assert marks(tmp_path) == ["sum 2+3"]
        r = await api.submit(sid, "jobs__broken", {}, call_id="toolu_b", wait=60)
        body = r.json()
        assert body["status"] == "failed" and body["result"]["is_error"], body
        assert "the downstream tool broke" in body["result"]["content"][0]["text"]


async def test_cancelling_the_call_cancels_the_downstream_task(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    found = await discover({"jobs": task_server(tmp_path)})
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, extra_tools=found.factories) as api:
        sid = await api.register()
        await api.submit(sid, "jobs__long_job", {"seconds": 60}, call_id="toolu_j")
        parked = await api.wait_parked(sid, "toolu_j")
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow"})
        assert r.status_code == 200, r.text
        for _ in range(300):
            if "started" in marks(tmp_path):
                break
            await asyncio.sleep(0.1)
        assert marks(tmp_path) == ["started"]
        cancel = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_j/cancel")
        assert cancel.status_code == 200, cancel.text
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_j", params={"wait": 30})
        assert done.json()["status"] == "cancelled", done.json()
        for _ in range(100):
            if "cancelled" in marks(tmp_path):
                break
            await asyncio.sleep(0.1)
        assert marks(tmp_path) == ["started", "cancelled"]
