"""parkgate as an MCP server, driven by the official `mcp` SDK client over a real
uvicorn socket (app lifespan on), with the real worker and Temporal dev server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from fastapi import FastAPI
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server

WAIT = {"mcp_call_wait_seconds": 2.0, "mcp_progress_seconds": 0.4}


@asynccontextmanager
async def served(
    client: Client, repo: Repository, tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[ApiRig, str]]:
    """The app in uvicorn with its lifespan (which runs the SDK's session manager)."""
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base, **settings) as api:
        async with live_server(api.app, sock, lifespan="on"):
            yield api, base


@asynccontextmanager
async def mcp_session(base: str, sid: str, key: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                  timeout=30) as http, \
            streamable_http_client(f"{base}/v1/sessions/{sid}/mcp", http_client=http) as (
                read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_tools_list_has_annotations_and_a_read_runs(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        sid = await api.register()
        (api.workspace / "a.txt").write_text("alpha")
        async with mcp_session(base, sid, api.key) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert {"read_file", "write_file", "shell"} <= set(tools)
            read, write, shell = tools["read_file"], tools["write_file"], tools["shell"]
            assert read.annotations and read.annotations.read_only_hint is True
            assert write.annotations and write.annotations.read_only_hint is False
            assert write.annotations.destructive_hint is True
            assert write.annotations.open_world_hint is False
            assert shell.annotations and shell.annotations.open_world_hint is True
            assert read.input_schema["properties"]["path"]
            assert (write.meta or {})["parkgate/side_effects"] == "write"

            result = await mcp.call_tool("read_file", {"path": "a.txt"})
            assert not result.is_error and "alpha" in text_of(result)
            generated = (result.meta or {})["tool_use_id"]
            assert generated.startswith("mcp_")
        row = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{generated}")
        assert row.json()["status"] == "succeeded" and row.json()["turn_id"] == "mcp"


async def test_parked_call_reports_progress_then_attaches_after_approval(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, **WAIT) as (api, base):
        sid = await api.register()
        progress: list[str] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with mcp_session(base, sid, api.key) as mcp:
            args = {"path": "out.txt", "content": "via mcp\n"}
            meta = {"tool_use_id": "toolu_m1"}
            first = await mcp.call_tool("write_file", args, progress_callback=on_progress,
                                        meta=meta)
            assert first.is_error
            assert "toolu_m1" in text_of(first) and "parked" in text_of(first)
            assert (first.meta or {})["parkgate/status"] == "parked"
            assert "parkgate/approval_url" not in (first.meta or {})  # the agent's own gate
            assert any("parked" in m for m in progress)
            assert not any("/approve/" in m for m in progress)
            assert not (api.workspace / "out.txt").exists()

            parked = await api.wait_parked(sid, "toolu_m1")
            decided = await api.http.post(
                f"/v1/sessions/{sid}/turns/mcp/confirmations/{parked['request_id']}",
                json={"decision": "allow"})
            assert decided.status_code == 200, decided.text

            again = await mcp.call_tool("write_file", args, meta=meta)
            assert not again.is_error, text_of(again)
            assert (again.meta or {})["tool_use_id"] == "toolu_m1"
            assert (again.meta or {})["parkgate/status"] == "succeeded"
            once_more = await mcp.call_tool("write_file", args, meta=meta)
            assert text_of(once_more) == text_of(again)
            other = await mcp.call_tool("write_file", {**args, "content": "other"}, meta=meta)
            assert other.is_error and "already names another call" in text_of(other)
        assert (api.workspace / "out.txt").read_text() == "via mcp\n"
        events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_m1/events")).json()
        assert [e["type"] for e in events["events"]].count("tool.completed") == 1


async def test_a_key_that_may_decide_gets_the_link_and_a_denial_is_an_error(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    policy = {"rules": [{"tool": "write_file", "mode": "prompt", "self_approval": True}]}
    async with served(dev_temporal, sqlite_repo, tmp_path, policy=policy, **WAIT) as (api, base):
        solo, _ = await api.repo.create_api_key("solo", roles=["agent", "approver"])
        sid = await api.register()
        progress: list[str] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress.append(message or "")

        async with mcp_session(base, sid, solo) as mcp:
            args = {"path": "d.txt", "content": "x"}
            meta = {"tool_use_id": "toolu_d1", "turn_id": "turn-7"}
            first = await mcp.call_tool("write_file", args, progress_callback=on_progress,
                                        meta=meta)
            url = (first.meta or {})["parkgate/approval_url"]
            assert url.startswith(base + "/approve/")
            assert any(url in m for m in progress)
            parked = await api.wait_parked(sid, "toolu_d1")
            assert parked["turn_id"] == "turn-7"
            r = await api.http.post(
                f"/v1/sessions/{sid}/turns/turn-7/confirmations/{parked['request_id']}",
                json={"decision": "deny", "reason": "not today"})
            assert r.status_code == 200, r.text
            denied = await mcp.call_tool("write_file", args, meta=meta)
            assert denied.is_error and "not today" in text_of(denied)
            assert (denied.meta or {})["parkgate/error_class"] == "user_denied"
        assert not (api.workspace / "d.txt").exists()


async def test_keys_roles_and_sessions_are_checked(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        sid = await api.register()
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        other, _ = await api.repo.create_api_key("elsewhere", project="other", roles=["agent"])
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            url = f"/v1/sessions/{sid}/mcp"
            anon = await http.post(url, json=init, headers=accept)
            assert anon.status_code == 401 and anon.headers["www-authenticate"] == "Bearer"
            assert anon.json()["error"]["code"] == "unauthorized"
            bad = await http.post(url, json=init, headers={**accept, "Authorization": "Bearer x"})
            assert bad.status_code == 401
            foreign = await http.post(url, json=init,
                                      headers={**accept, "Authorization": f"Bearer {other}"})
            assert foreign.status_code == 404
            missing = await http.post("/v1/sessions/nope/mcp", json=init,
                                      headers={**accept, "Authorization": f"Bearer {api.key}"})
            assert missing.status_code == 404
            ok = await http.post(url, json=init,
                                 headers={**accept, "Authorization": f"Bearer {api.key}"})
            assert ok.status_code == 200, ok.text
        # The human's key (approver, auditor) may list tools but not call them.
        async with mcp_session(base, sid, api.human_key) as mcp:
            assert (await mcp.list_tools()).tools
            refused = await mcp.call_tool("read_file", {"path": "a.txt"})
            assert refused.is_error and "agent role" in text_of(refused)
        async with mcp_session(base, sid, api.key) as mcp:
            bad_id = await mcp.call_tool("read_file", {"path": "a.txt"},
                                         meta={"tool_use_id": "no spaces"})
            assert bad_id.is_error and "_meta.tool_use_id" in text_of(bad_id)
            unknown = await mcp.call_tool("no_such_tool", {})
            assert unknown.is_error and (unknown.meta or {})["parkgate/status"] != "parked"


async def test_without_the_lifespan_the_endpoint_says_so(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path) as api:
        sid = await api.register()
        app: FastAPI = api.app
        r = await api.http.post(f"/v1/sessions/{sid}/mcp", json={},
                                headers={"Authorization": f"Bearer {api.key}"})
        assert r.status_code == 503 and "lifespan" in r.json()["error"]["message"]
        assert app.state.mcp.running is False
        for _ in range(2):  # a lifespan may run again (each gets a fresh SDK manager)
            async with app.router.lifespan_context(app):
                assert app.state.mcp.running is True
        assert app.state.mcp.running is False


#: How long the next test keeps a call parked: several of a default client's 5 s read timeouts.
PARK_SECONDS = 20.0


@pytest.mark.slow
async def test_clients_with_default_timeouts_wait_through_a_20_s_park(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Default settings (progress every `mcp_progress_seconds` = 2 s). One client is
    httpx's default (5 s read timeout) asking for progress: the notifications keep
    its stream alive. One asks for no progress, so it hears nothing until the
    answer: it has the long read timeout the README's snippet sets."""
    async with served(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        sid = await api.register()
        headers = {"Authorization": f"Bearer {api.key}"}
        ticks: list[str] = []

        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            ticks.append(message or "")

        async def call(http: httpx2.AsyncClient, tool_use_id: str,
                       progress: Any) -> types.CallToolResult:
            async with http, \
                    streamable_http_client(f"{base}/v1/sessions/{sid}/mcp", http_client=http) as (
                        read, write), \
                    ClientSession(read, write) as mcp:
                await mcp.initialize()
                return await mcp.call_tool(
                    "write_file", {"path": f"{tool_use_id}.txt", "content": "late\n"},
                    meta={"tool_use_id": tool_use_id}, progress_callback=progress)

        async def approve_after_the_park() -> None:
            parked = [await api.wait_parked(sid, t) for t in ("toolu_p1", "toolu_p2")]
            await asyncio.sleep(PARK_SECONDS)
            for resource in parked:
                r = await api.http.post(
                    f"/v1/sessions/{sid}/turns/mcp/confirmations/{resource['request_id']}",
                    json={"decision": "allow"})
                assert r.status_code == 200, r.text

        plain, quiet, _ = await asyncio.gather(
            call(httpx2.AsyncClient(headers=headers), "toolu_p1", on_progress),
            call(httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)),
                 "toolu_p2", None),
            approve_after_the_park(),
        )
        assert not plain.is_error, text_of(plain)
        assert not quiet.is_error, text_of(quiet)
        assert (plain.meta or {})["parkgate/status"] == "succeeded"
        assert len(ticks) >= PARK_SECONDS / 5 and all("parked" in t or "running" in t
                                                      or "queued" in t for t in ticks)
        assert (api.workspace / "toolu_p1.txt").read_text() == "late\n"
        assert (api.workspace / "toolu_p2.txt").read_text() == "late\n"
