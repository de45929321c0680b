"""The API SIGKILLed while MCP tasks and an agent's command hook are in flight
(the new paths' kill -9 tests, beside test_api_restart's for the REST calls).

MCP: three parked tasks and a `tasks/result` held on one of them when the API
dies; after the restart each task is still there (`tasks/get`), one approved
completes and runs once, one denied fails, one cancelled ends without running.
Codex: `parkgate hook codex` holding a parked shell call when the API dies
blocks the call (exit 2, the reason on stderr: the agent never runs it on a
broken hook); after the restart and an approval the same event is allowed
once and a second copy of it is not. Every call's events are there once and
`parkgate audit verify` passes. Real API and worker processes, dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.conftest import StackFactory
from tests.faults.harness import summary
from tests.faults.harness.apiclient import AgentClient
from tests.faults.harness.stack import Stack

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

ACCEPT = {"Accept": "application/json, text/event-stream",
          "MCP-Protocol-Version": "2025-11-25"}


def parkgate_bin() -> str:
    return str(Path(sys.executable).parent / "parkgate")


async def rpc(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
              timeout: float = 30) -> dict[str, Any]:
    r = await http.post(url, headers=ACCEPT, timeout=timeout, json={
        "jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert r.status_code == 200, r.text
    body = r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        body = [ln[5:] for ln in body.splitlines() if ln.startswith("data:")][-1]
    out: dict[str, Any] = json.loads(body)
    return out


async def decide(client: AgentClient, sid: str, tuid: str, turn: str, decision: str) -> None:
    call = await client.wait_status(sid, tuid, {"parked"}, timeout=30)
    rid = await client.request_id(sid, call)
    r = await client.decide(sid, turn, rid, decision, "by the test")
    assert r.status_code == 200, r.text


async def once(client: AgentClient, sid: str, tuid: str, *types: str) -> list[str]:
    seen = [e["type"] for e in await client.events(sid, tuid)]
    for kind in types:
        assert seen.count(kind) == 1, (tuid, kind, seen)
    return seen


async def verified(stack: Stack) -> None:
    out = await stack.acli("audit", "verify")
    assert out.returncode == 0, out.stdout + out.stderr


async def test_api_killed_with_mcp_tasks_parked_and_a_result_held(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=1, extra_env={"PARKGATE_MCP_TASK_WAIT_SECONDS": "0.5"})
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True
    sid = f"s-mcp-{uuid.uuid4().hex[:6]}"
    await client.register_session(sid, str(stack.untrusted))
    url = f"/v1/sessions/{sid}/mcp"
    http = httpx.AsyncClient(base_url=stack.base_url, timeout=30,
                             headers={"Authorization": f"Bearer {stack.api_key}"})
    try:
        await rpc(http, url, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "t", "version": "1"}})
        tasks = {}
        for name in ("ran", "nope", "gone"):
            made = await rpc(http, url, "tools/call", {
                "name": "write_file", "arguments": {"path": f"{name}.txt", "content": "x\n"},
                "task": {"ttl": 600000}, "_meta": {"tool_use_id": f"tu_{name}"}})
            tasks[name] = made["result"]["task"]["taskId"]
        held = asyncio.create_task(rpc(http, url, "tasks/result", {"taskId": tasks["ran"]},
                                       timeout=60))
        await asyncio.sleep(1.0)  # the result is held inside the API
        await stack.restart_api(kill=True)
        with pytest.raises(httpx.TransportError):
            await held  # the held request died with the API: the client asks again
        for name, tid in tasks.items():
            got = await rpc(http, url, "tasks/get", {"taskId": tid})
            assert got["result"]["status"] == "working", (name, got)
        again = asyncio.create_task(rpc(http, url, "tasks/result", {"taskId": tasks["ran"]},
                                        timeout=60))
        await decide(client, sid, "tu_ran", "mcp", "allow")
        await decide(client, sid, "tu_nope", "mcp", "deny")
        cancelled = await rpc(http, url, "tasks/cancel", {"taskId": tasks["gone"]})
        assert cancelled["result"]["status"] == "cancelled", cancelled
        done = await again
        assert done["result"]["isError"] is False, done
        nope = await rpc(http, url, "tasks/get", {"taskId": tasks["nope"]})
        assert nope["result"]["status"] == "failed", nope
    finally:
        await http.aclose()
    assert (stack.untrusted / "ran.txt").read_text() == "x\n"
    assert not (stack.untrusted / "nope.txt").exists()
    assert not (stack.untrusted / "gone.txt").exists()
    await once(client, sid, "tu_ran", "tool.confirmation_requested", "tool.completed")
    for name in ("nope", "gone"):
        seen = await once(client, sid, f"tu_{name}", "tool.confirmation_requested")
        assert "tool.completed" not in seen, seen
    await client.aclose()
    await verified(stack)
    summary.add(calls_run=1, faults_injected=stack.faults)


async def parked(stack: Stack, sid: str, tuid: str) -> None:
    """Until the hook's call is parked (its session appears with it)."""
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10, headers={
            "Authorization": f"Bearer {stack.human_key}"}) as http:
        for _ in range(300):
            r = await http.get(f"/v1/sessions/{sid}/tool-calls/{tuid}")
            if r.status_code in (200, 202) and r.json().get("status") == "parked":
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{tuid} never parked")


async def hook(stack: Stack, event: dict[str, Any]) -> tuple[int, str, str]:
    """`parkgate hook codex` as Codex runs it for one event."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env.update(PARKGATE_API_KEY=stack.api_key or "", PARKGATE_DATA_DIR=str(stack.root / "hk"))
    proc = await asyncio.create_subprocess_exec(
        parkgate_bin(), "hook", "codex", "--url", stack.base_url, "--timeout", "60", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(event).encode()), 90)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_api_killed_while_a_codex_hook_holds_a_parked_call(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=1, extra_env={"PARKGATE_CODEX_WAIT_SECONDS": "30"})
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    event = {"hook_event_name": "PreToolUse", "session_id": sid, "cwd": str(stack.untrusted),
             "tool_name": "Bash", "tool_input": {"command": "make deploy"},
             "tool_use_id": "call_deploy", "turn_id": "turn-1", "model": "m",
             "permission_mode": "default", "transcript_path": None}
    holding = asyncio.create_task(hook(stack, event))
    await parked(stack, sid, "call_deploy")
    await asyncio.sleep(0.5)  # the hook's request is held in the API
    await stack.restart_api(kill=True)
    code, out, err = await holding
    assert code == 2 and out == "" and "blocked" in err, (code, out, err)  # never a run
    await decide(client, sid, "call_deploy", "turn-1", "allow")
    first, second = await asyncio.gather(hook(stack, event), hook(stack, event))
    allowed = [r for r in (first, second) if r[0] == 0 and json.loads(r[1]) == {}]
    assert len(allowed) == 1, (first, second)
    after = {**event, "hook_event_name": "PostToolUse", "tool_response": "deployed"}
    code, out, err = await hook(stack, after)
    assert code == 0, (code, out, err)
    done = await client.wait_status(sid, "call_deploy", {"succeeded"}, timeout=30)
    assert done["status"] == "succeeded", done
    await once(client, sid, "call_deploy", "tool.confirmation_requested", "tool.released",
               "tool.claim_started", "tool.outcome_reported")
    await client.aclose()
    await verified(stack)
    summary.add(calls_run=1, faults_injected=stack.faults)
