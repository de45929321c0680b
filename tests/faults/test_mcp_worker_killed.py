"""The only worker SIGKILLed while one MCP task's tool runs and another's call
is parked (the MCP tasks path held to test_worker_crash's kill -9 test).

A shell task in the trusted workspace is running (its marker written, the
command still sleeping; sandboxed, it dies with its worker and never writes
its second marker) and a write_file task waits for a human when every
worker is killed; a new worker starts. The running task ends the way
docs/DURABLE.md says a lost mutating run ends: `failed` with "worker lost
during execution; outcome unknown", never run again; `tasks/get` says
`failed` and `tasks/result` gives that text as an error. The parked task is
approved after the kill: `tasks/result` gives its result, the file is written
once. Every call's events are there once and `parkgate audit verify`
passes. Real API and worker processes, dev server (2025-11-25 task wire).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from parkgate.durable.payloads import WORKER_LOST_TEXT
from parkgate.sandbox.launch import sandbox_reason
from tests.faults.conftest import StackFactory
from tests.faults.harness import summary
from tests.faults.harness.apiclient import AgentClient
from tests.faults.test_new_paths_killed import decide, once, rpc, verified

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]

#: The lost run is noticed within this heartbeat timeout (default 20 s).
HEARTBEAT_SECONDS = "3"


async def opened(http: httpx.AsyncClient, url: str) -> None:
    await rpc(http, url, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                        "clientInfo": {"name": "t", "version": "1"}})


async def task(http: httpx.AsyncClient, url: str, name: str, arguments: dict[str, str],
               tool_use_id: str) -> str:
    made = await rpc(http, url, "tools/call", {
        "name": name, "arguments": arguments, "task": {"ttl": 600000},
        "_meta": {"tool_use_id": tool_use_id}})
    assert "task" in made["result"], made  # still working after the task wait
    return str(made["result"]["task"]["taskId"])


async def until_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(path.exists):
        assert time.monotonic() < deadline, f"{path.name} never written"
        await asyncio.sleep(0.05)


async def test_worker_killed_with_an_mcp_task_running_and_one_parked(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=1, extra_env={
        "PARKGATE_MCP_TASK_WAIT_SECONDS": "0.5",
        "PARKGATE_EXECUTE_HEARTBEAT_TIMEOUT_SECONDS": HEARTBEAT_SECONDS})
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True  # a 503 while no worker serves is honest
    run_sid, park_sid = (f"s-mcp-{uuid.uuid4().hex[:6]}" for _ in range(2))
    await client.register_session(run_sid, str(stack.trusted))  # EXECUTE runs at once
    await client.register_session(park_sid, str(stack.untrusted))  # WRITE parks
    run_url, park_url = (f"/v1/sessions/{s}/mcp" for s in (run_sid, park_sid))
    ran = stack.trusted / "markers" / "mcp-ran.txt"
    http = httpx.AsyncClient(base_url=stack.base_url, timeout=30,
                             headers={"Authorization": f"Bearer {stack.api_key}"})
    try:
        await opened(http, run_url)
        await opened(http, park_url)
        running = await task(http, run_url, "shell", {
            "command": "echo ran >> markers/mcp-ran.txt; sleep 4; echo on >> markers/mcp-on.txt"},
            "tu_running")
        parked = await task(http, park_url, "write_file",
                            {"path": "parked.txt", "content": "x\n"}, "tu_parked")
        await until_file(ran)  # the tool is running now
        await client.wait_status(park_sid, "tu_parked", {"parked"}, timeout=30)
        assert (await client.wait_status(run_sid, "tu_running", {"running"},
                                         timeout=10))["status"] == "running"
        for worker in stack.live_workers():
            await stack.kill_worker(worker)
        killed = time.monotonic()
        stack.start_worker()
        for url, tid in ((run_url, running), (park_url, parked)):
            got = await rpc(http, url, "tasks/get", {"taskId": tid})
            assert got["result"]["status"] in ("working", "failed"), got
        await decide(client, park_sid, "tu_parked", "mcp", "allow")
        done = await rpc(http, park_url, "tasks/result", {"taskId": parked}, timeout=60)
        assert done["result"]["isError"] is False, done
        lost = await rpc(http, run_url, "tasks/result", {"taskId": running}, timeout=60)
        assert lost["result"]["isError"] is True, lost
        assert WORKER_LOST_TEXT in lost["result"]["content"][0]["text"], lost
        got = await rpc(http, run_url, "tasks/get", {"taskId": running})
        assert got["result"]["status"] == "failed", got
        assert (await rpc(http, park_url, "tasks/get", {"taskId": parked})
                )["result"]["status"] == "completed"
    finally:
        await http.aclose()
    # The call has ended, so it cannot be run again: it ran once.
    assert ran.read_text() == "ran\n"
    if await sandbox_reason("unshare") is None:  # the sandbox dies with its worker
        await asyncio.sleep(max(0.0, killed + 5 - time.monotonic()))  # past its sleep
        assert not (stack.trusted / "markers" / "mcp-on.txt").exists()
    assert (stack.untrusted / "parked.txt").read_text() == "x\n"
    row = await client.wait_status(run_sid, "tu_running", {"failed"}, timeout=10)
    assert row["error_class"] == "execution_error", row
    seen = await once(client, run_sid, "tu_running", "tool.called", "tool.failed")
    assert "tool.completed" not in seen, seen
    await once(client, park_sid, "tu_parked", "tool.confirmation_requested", "tool.called",
               "tool.completed")
    await client.aclose()
    await verified(stack)
    summary.add(calls_run=2, faults_injected=stack.faults)
