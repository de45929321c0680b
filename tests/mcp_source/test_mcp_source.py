"""MCP servers as tool sources: discovery, the gate, crashes and timeouts, with a
real MCP server (tests/mcp_source/notes_server.py) started as a subprocess."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, cast

import psutil
from temporalio.client import Client

from parkgate.calls.records import HistoryStore
from parkgate.mcp_source.config import McpServer
from parkgate.mcp_source.discover import discover
from parkgate.models import SideEffects
from parkgate.runtime.worker import build_deps
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from tests.api.rig import api_rig
from tests.fixtures.temporal import make_settings

SERVER = str(Path(__file__).with_name("notes_server.py"))


def notes(tmp_path: Path, **extra: Any) -> McpServer:
    return McpServer(command=[sys.executable, SERVER],
                     env={"NOTES_FILE": str(tmp_path / "notes.txt"),
                          "PID_FILE": str(tmp_path / "hang.pid")}, **extra)


async def test_discovery_maps_annotations_overrides_and_skips(tmp_path: Path) -> None:
    found = await discover({
        "notes": notes(tmp_path, side_effects={"plain": SideEffects.READ}),
        "gone": McpServer(command=[str(tmp_path / "no-such-server")]),
    })
    classes = {d.name: d.side_effects for d in found.definitions}
    assert classes == {
        "notes__lookup": SideEffects.READ,
        "notes__append_note": SideEffects.WRITE,
        "notes__fetch": SideEffects.NETWORK,
        "notes__plain": SideEffects.READ,  # overridden (no hints would be EXECUTE)
        "notes__crash": SideEffects.READ,
        "notes__hang": SideEffects.READ,
    }
    skipped = {(s.server, s.tool): s.reason for s in found.skipped}
    assert "anyOf" in skipped[("notes", "wide")]
    assert ("gone", None) in skipped
    plain = await discover({"notes": notes(tmp_path)})
    assert {d.name: d.side_effects for d in plain.definitions}["notes__plain"] == \
        SideEffects.EXECUTE


async def test_settings_wire_the_tools_into_the_worker_registry(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    settings: Settings = make_settings(tmp_path / "data", tmp_path,
                                       mcp_servers={"notes": notes(tmp_path).model_dump()})
    deps = await build_deps(settings, store=cast(HistoryStore, sqlite_repo))
    assert "notes__lookup" in deps.pipeline.registry
    assert "notes__wide" not in deps.pipeline.registry


async def test_calls_go_through_the_gate_and_run_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    found = await discover({"notes": notes(tmp_path)})
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, extra_tools=found.factories) as api:
        sid = await api.register()
        read = await api.submit(sid, "notes__lookup", {"text": "x"}, call_id="toolu_l", wait=30)
        assert read.status_code == 200 and read.json()["status"] == "succeeded"
        assert "found x" in read.json()["result"]["content"][0]["text"]

        await api.submit(sid, "notes__append_note", {"text": "one"}, call_id="toolu_n")
        parked = await api.wait_parked(sid, "toolu_n")
        assert parked["side_effects"] == "write"
        assert not (tmp_path / "notes.txt").exists()
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow"})
        assert r.status_code == 200, r.text
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_n", params={"wait": 30})
        assert done.json()["status"] == "succeeded"
        again = await api.submit(sid, "notes__append_note", {"text": "one"}, call_id="toolu_n",
                                 wait=30)
        assert again.json()["result"] == done.json()["result"]
        assert (tmp_path / "notes.txt").read_text() == "one\n"  # ran exactly once

        bad = await api.submit(sid, "notes__lookup", {"nope": 1}, call_id="toolu_v", wait=30)
        assert bad.json()["result"]["is_error"]
        assert bad.json()["error_class"] == "validation_error"


async def test_a_server_crash_mid_call_is_an_error_result_and_the_next_call_works(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    found = await discover({"notes": notes(tmp_path)})
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, extra_tools=found.factories) as api:
        sid = await api.register()
        crashed = await api.submit(sid, "notes__crash", {}, call_id="toolu_c", wait=30)
        body = crashed.json()
        assert body["status"] == "failed", body
        assert body["result"]["is_error"] and body["error_class"] == "execution_error"
        assert "notes" in body["result"]["content"][0]["text"]
        after = await api.submit(sid, "notes__lookup", {"text": "y"}, call_id="toolu_a", wait=30)
        assert after.json()["status"] == "succeeded"


async def test_a_timeout_cancels_the_call_and_stops_the_server(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    # Long enough for the server process to start and reach `hang` on a busy machine.
    found = await discover({"notes": notes(tmp_path, timeout_seconds=6)})
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, extra_tools=found.factories) as api:
        sid = await api.register()
        r = await api.submit(sid, "notes__hang", {}, call_id="toolu_h", wait=40)
        body = r.json()
        assert body["finished"] and body["error_class"] == "timeout", body
        pid = int((tmp_path / "hang.pid").read_text())
        for _ in range(50):
            if (tmp_path / "hang.pid.cancelled").exists():
                break
            await asyncio.sleep(0.1)
        assert (tmp_path / "hang.pid.cancelled").read_text() == "notifications/cancelled"
        for _ in range(100):
            if not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"MCP server {pid} still running after the timeout")
