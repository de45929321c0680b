"""Parked calls as MCP tasks, over a real uvicorn socket with the real worker and
Temporal dev server: protocol 2026-07-28's tasks extension driven by the official
`mcp` SDK `Client` (with fastmcp-tasks' client extension) and by FastMCP's
`Client`; protocol 2025-11-25's task-augmented tools/call as JSON-RPC on the wire
(the installed SDK's client checks a 2025-11-25 tools/call answer against
`CallToolResult` and so cannot take a task there)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import TasksClientExtension, call_tool_task
from fastmcp_tasks.client_models import (
    CancelTaskRequest,
    CancelTaskRequestParams,
    ClientCreateTaskResult,
    ClientGetTaskResult,
    GetTaskRequest,
    GetTaskRequestParams,
)
from mcp import Client as McpClient
from mcp.client.client import ConnectMode
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters
from tests.api.rig import ApiRig
from tests.api.test_mcp_gateway import served, text_of

TASKS = {"mcp_task_wait_seconds": 1.0, "mcp_task_poll_seconds": 0.2}
ACCEPT = {"Accept": "application/json, text/event-stream",
          "MCP-Protocol-Version": "2025-11-25"}


@asynccontextmanager
async def official(base: str, sid: str, key: str,
                   mode: ConnectMode = "auto") -> AsyncIterator[McpClient]:
    """The official SDK's Client on 2026-07-28, declaring the tasks extension.
    `auto` probes `server/discover` (the SDK falls back to 2025-11-25 when the
    probe takes over 10 s); a version string adopts it without the probe."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    transport = streamable_http_client(f"{base}/v1/sessions/{sid}/mcp", http_client=http)
    async with http, McpClient(transport, extensions=[TasksClientExtension()],
                               mode=mode) as client:
        assert client.session.protocol_version == "2026-07-28"
        yield client


async def create(client: McpClient, name: str, args: dict[str, Any],
                 tool_use_id: str) -> ClientCreateTaskResult | types.CallToolResult:
    return await client.session.call_tool(name, args, meta={"tool_use_id": tool_use_id},
                                          allow_claimed=True)  # type: ignore[return-value]


async def get(client: McpClient, task_id: str) -> ClientGetTaskResult:
    return await client.session.send_request(
        GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), ClientGetTaskResult)


async def poll_until(client: McpClient, task_id: str, *states: str) -> ClientGetTaskResult:
    for _ in range(300):
        task = await get(client, task_id)
        if task.status in states:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {states}: {task}")


async def decide(api: ApiRig, sid: str, tool_use_id: str, decision: str,
                 reason: str | None = None) -> None:
    parked = await api.wait_parked(sid, tool_use_id)
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/mcp/confirmations/{parked['request_id']}",
        json={"decision": decision, **({"reason": reason} if reason else {})})
    assert r.status_code == 200, r.text


async def test_official_client_parked_call_is_a_task_through_reconnects(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        (api.workspace / "a.txt").write_text("alpha")
        async with official(base, sid, api.key) as mcp:
            # An auto-allowed read answers directly, as without tasks.
            read = await create(mcp, "read_file", {"path": "a.txt"}, "toolu_r")
            assert isinstance(read, types.CallToolResult) and "alpha" in text_of(read)
            made = await create(mcp, "write_file", {"path": "t.txt", "content": "x\n"},
                                "toolu_t1")
            assert isinstance(made, ClientCreateTaskResult), made
            assert made.task_id == f"call/{sid}/toolu_t1" and made.status == "working"
            assert made.poll_interval_ms == 200
            working = await get(mcp, made.task_id)
            message = working.status_message or ""
            assert working.status == "working" and "parked for approval" in message
            assert "/inbox" in message and "/approve/" not in message
        assert not (api.workspace / "t.txt").exists()
        await decide(api, sid, "toolu_t1", "allow")
        async with official(base, sid, api.key) as mcp:  # a new connection, same task
            done = await poll_until(mcp, made.task_id, "completed", "failed")
            assert done.status == "completed", done
            assert done.result and done.result["_meta"]["parkgate/status"] == "succeeded"
        assert (api.workspace / "t.txt").read_text() == "x\n"


async def test_deny_fails_cancel_cancels_and_strangers_get_not_found(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid, other_sid = await api.register(), await api.register()
        async with official(base, sid, api.key) as mcp:
            denied = await create(mcp, "write_file", {"path": "d.txt", "content": "d"}, "toolu_d")
            assert isinstance(denied, ClientCreateTaskResult)
            await decide(api, sid, "toolu_d", "deny", "not today")
            failed = await poll_until(mcp, denied.task_id, "failed", "completed")
            assert failed.status == "failed" and failed.error is not None
            assert "not today" in failed.error["message"]
            assert failed.error["data"]["status"] == "denied"

            gone = await create(mcp, "write_file", {"path": "c.txt", "content": "c"}, "toolu_c")
            assert isinstance(gone, ClientCreateTaskResult)
            await mcp.session.send_request(
                CancelTaskRequest(params=CancelTaskRequestParams(task_id=gone.task_id)),
                types.Result)
            cancelled = await poll_until(mcp, gone.task_id, "cancelled", "failed", "completed")
            assert cancelled.status == "cancelled", cancelled
        assert not (api.workspace / "c.txt").exists() and not (api.workspace / "d.txt").exists()
        row = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_c")).json()
        assert row["status"] == "cancelled" and row["started_at"] is None
        # tasks/cancel names the key and the channel in the record.
        key = await api.repo.verify_api_key(api.key)
        assert key is not None
        said = row["result"]["content"][0]["text"]
        assert said == f"The call was cancelled before it ran (by key '{key.name}' " \
            "via mcp tasks/cancel).", said
        [failed] = [e for e in await api.repo.call_events(sid, "toolu_c")
                    if e.type == "tool.failed"]
        assert failed.data == {"cancelled_by": f"key '{key.name}'", "via": "mcp tasks/cancel",
                               "reason": None}, failed.data

        # The same task id at another session's endpoint, and an id that names nothing.
        async with official(base, other_sid, api.key) as stranger:
            for tid in (denied.task_id, f"call/{other_sid}/nope", "garbage"):
                with pytest.raises(Exception) as raised:
                    await get(stranger, tid)
                assert "not found" in str(raised.value)


async def test_fastmcp_client_task_handle_and_twenty_concurrent_tasks(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        transport = StreamableHttpTransport(f"{base}/v1/sessions/{sid}/mcp",
                                            headers={"Authorization": f"Bearer {api.key}"})
        async with FastClient(transport) as client:
            handles = await asyncio.gather(*(
                call_tool_task(client, "write_file",
                               {"path": f"f{i}.txt", "content": f"{i}\n"},
                               meta={"tool_use_id": f"toolu_f{i}"})
                for i in range(20)))
            assert len({h.task_id for h in handles}) == 20
            assert [(await h.status()).status for h in handles[:3]] == ["working"] * 3
            await asyncio.gather(*(decide(api, sid, f"toolu_f{i}", "allow") for i in range(20)))
            results = await asyncio.gather(*(h.result() for h in handles))
            assert all(not r.is_error for r in results)
        for i in range(20):
            assert (api.workspace / f"f{i}.txt").read_text() == f"{i}\n"


async def test_a_task_waits_through_hours_of_skipped_time(
    temporal_env: WorkflowEnvironment, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Approved three hours later: completed. Left a day: expired, failed with why.
    (Time-skipping server; the task is created at once, `mcp_task_wait_seconds=0`,
    so no wait on a workflow result skips time past the approval's expiry.)"""
    settings = {**TASKS, "mcp_task_wait_seconds": 0.0}
    async with served(temporal_env.client, sqlite_repo, tmp_path, **settings) as (api, base):
        sid = await api.register()
        async with official(base, sid, api.key) as mcp:
            late = await create(mcp, "write_file", {"path": "h.txt", "content": "h\n"}, "toolu_h")
            never = await create(mcp, "write_file", {"path": "n.txt", "content": "n"}, "toolu_n")
            assert isinstance(late, ClientCreateTaskResult)
            assert isinstance(never, ClientCreateTaskResult)
            await api.wait_parked(sid, "toolu_h")
            await api.wait_parked(sid, "toolu_n")
            await temporal_env.sleep(timedelta(hours=3))
            still = await get(mcp, late.task_id)
            assert still.status == "working" and "parked for approval" in (
                still.status_message or "")
        await decide(api, sid, "toolu_h", "allow")
        async with official(base, sid, api.key) as mcp:
            done = await poll_until(mcp, late.task_id, "completed", "failed", "cancelled")
            assert done.status == "completed", done
            await temporal_env.sleep(timedelta(hours=25))
            expired = await poll_until(mcp, never.task_id, "completed", "failed", "cancelled")
            assert expired.status == "failed" and expired.error is not None, expired
            assert expired.error["data"]["status"] == "expired"
        assert (api.workspace / "h.txt").read_text() == "h\n"
        assert not (api.workspace / "n.txt").exists()


async def rpc(http: httpx.AsyncClient, url: str, method: str, params: dict[str, Any],
              rid: int = 1) -> dict[str, Any]:
    r = await http.post(url, json={"jsonrpc": "2.0", "id": rid, "method": method,
                                   "params": params}, headers=ACCEPT)
    assert r.status_code == 200, r.text  # never a 5xx: errors are JSON-RPC errors
    body = r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        body = [ln[5:] for ln in body.splitlines() if ln.startswith("data:")][-1]
    out: dict[str, Any] = json.loads(body)
    return out


async def test_protocol_2025_11_25_tasks_on_the_wire(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        url = f"/v1/sessions/{sid}/mcp"
        headers = {"Authorization": f"Bearer {api.key}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
            init = await rpc(http, url, "initialize", {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}})
            assert init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"] == {}
            tools = await rpc(http, url, "tools/list", {})
            assert all(t["execution"]["taskSupport"] == "optional"
                       for t in tools["result"]["tools"])
            made = await rpc(http, url, "tools/call", {
                "name": "write_file", "arguments": {"path": "w.txt", "content": "w"},
                "task": {"ttl": 60000}, "_meta": {"tool_use_id": "toolu_w"}})
            task = made["result"]["task"]
            assert task["taskId"] == f"call/{sid}/toolu_w" and task["status"] == "working"
            got = await rpc(http, url, "tasks/get", {"taskId": task["taskId"]})
            assert got["result"]["status"] == "working"
            assert "parked for approval" in got["result"]["statusMessage"]
            listed = await rpc(http, url, "tasks/list", {})
            assert [t["taskId"] for t in listed["result"]["tasks"]] == [task["taskId"]]
            await decide(api, sid, "toolu_w", "allow")
            result = await rpc(http, url, "tasks/result", {"taskId": task["taskId"]})
            assert result["result"]["isError"] is False
            assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {
                "taskId": task["taskId"]}
            done = await rpc(http, url, "tasks/get", {"taskId": task["taskId"]})
            assert done["result"]["status"] == "completed"
            again = await rpc(http, url, "tasks/cancel", {"taskId": task["taskId"]})
            assert again["error"]["code"] == types.INVALID_PARAMS

            # Malformed requests: JSON-RPC errors, never a 5xx.
            for method, params in (
                    ("tasks/get", {"taskId": "call/other/toolu_w"}),
                    ("tasks/get", {"taskId": f"call/{sid}/no_such"}),
                    ("tasks/result", {"taskId": "x"}),
                    ("tasks/cancel", {"taskId": f"call/{sid}/../etc"}),
                    ("tasks/get", {}),
                    ("tasks/list", {"cursor": "not-a-cursor"}),
                    ("tools/call", {"name": "write_file", "arguments": {}, "task": {"ttl": -1}}),
                    ("tools/call", {"name": "write_file", "arguments": {},
                                    "task": {"ttl": "soon"}})):
                answer = await rpc(http, url, method, params)
                assert answer["error"]["code"] == types.INVALID_PARAMS, (method, answer)
            # A key of another project does not reach the session at all.
            other, _ = await api.repo.create_api_key("elsewhere", project="other",
                                                     roles=["agent"])
            foreign = await http.post(url, headers={**ACCEPT, "Authorization": f"Bearer {other}"},
                                      json={"jsonrpc": "2.0", "id": 9, "method": "tasks/get",
                                            "params": {"taskId": task["taskId"]}})
            assert foreign.status_code == 404


async def test_protocol_2026_without_tasks_answers_input_required_with_the_inbox(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """The official Client's own multi-round-trip driver: the URL input request
    names the inbox item (never the signed link); the person decides there; the
    client's retry with parkgate's requestState attaches to the same call."""
    async with served(dev_temporal, sqlite_repo, tmp_path, **TASKS) as (api, base):
        sid = await api.register()
        asked: list[types.ElicitRequestURLParams] = []

        async def person(context: Any, params: Any) -> types.ElicitResult:
            assert isinstance(params, types.ElicitRequestURLParams)
            asked.append(params)
            await decide(api, sid, "toolu_mr", "allow")
            return types.ElicitResult(action="accept")

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api.key}"}, timeout=30)
        transport = streamable_http_client(f"{base}/v1/sessions/{sid}/mcp", http_client=http)
        async with http, McpClient(transport, elicitation_callback=person) as mcp:
            assert mcp.session.protocol_version == "2026-07-28"
            result = await mcp.call_tool("write_file", {"path": "mr.txt", "content": "mr\n"},
                                         meta={"tool_use_id": "toolu_mr"})
            assert not result.is_error, text_of(result)
            assert (result.meta or {})["parkgate/status"] == "succeeded"
            parked = await mcp.session.call_tool(
                "write_file", {"path": "p.txt", "content": "p"}, meta={"tool_use_id": "toolu_p"},
                allow_input_required=True)
            assert isinstance(parked, types.InputRequiredResult) and parked.request_state
            again = await mcp.session.call_tool(  # no _meta: the state names the call
                "write_file", {"path": "p.txt", "content": "p"},
                request_state=parked.request_state, allow_input_required=True)
            assert isinstance(again, types.InputRequiredResult)
            assert (again.meta or {})["tool_use_id"] == "toolu_p"
            with pytest.raises(MCPError) as undeclared:  # tasks/* needs the extension
                await get(mcp, f"call/{sid}/toolu_p")  # type: ignore[arg-type]
            assert undeclared.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
            forged = parked.request_state[:-2] + ("AA" if parked.request_state[-2:] != "AA"
                                                  else "BB")
            with pytest.raises(Exception) as refused:
                await mcp.session.call_tool("write_file", {"path": "p.txt", "content": "p"},
                                            request_state=forged, allow_input_required=True)
            assert "requestState" in str(refused.value)
        assert len(asked) == 1 and asked[0].url.startswith(f"{base}/inbox#r-")
        assert "parked for approval" in asked[0].message and "/approve/" not in asked[0].url
        assert (api.workspace / "mr.txt").read_text() == "mr\n"
        listed = await api.repo.list_calls(CallFilters(session_id=sid))
        assert sorted(c.tool_use_id for c in listed.items) == ["toolu_mr", "toolu_p"]
        events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_mr/events")).json()
        assert [e["type"] for e in events["events"]].count("tool.completed") == 1
