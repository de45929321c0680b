"""The session event stream: SSE ids are event seqs; resuming never gaps or repeats."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


def parse_sse(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = fields.get(name, "") + value.lstrip(" ")
        if "data" in fields:
            events.append({"id": int(fields["id"]), "event": fields["event"],
                           "data": json.loads(fields["data"])})
    return events


async def test_backlog_and_resume_without_gap_or_duplicate(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "a.txt").write_text("a")
    for i in range(4):
        r = await api.submit(sid, "read_file", {"path": "a.txt"}, call_id=f"toolu_{i}", wait=20)
        assert r.status_code == 200
    url = f"/v1/sessions/{sid}/events"
    full = parse_sse((await api.http.get(url, params={"follow": "false"})).text)
    assert len(full) == 8  # called + completed per call
    ids = [e["id"] for e in full]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {e["event"] for e in full} == {"tool.called", "tool.completed"}
    assert all(e["data"]["session_id"] == sid and e["data"]["seq"] == e["id"] for e in full)
    # Resume from the middle: exactly the rest.
    mid = full[3]["id"]
    rest = parse_sse((await api.http.get(url, params={"follow": "false"},
                                         headers={"Last-Event-ID": str(mid)})).text)
    assert [e["id"] for e in rest] == ids[4:]
    after = parse_sse((await api.http.get(url, params={"follow": "false", "after": ids[-1]})).text)
    assert after == []
    bad = await api.http.get(url, params={"follow": "false"}, headers={"Last-Event-ID": "x"})
    assert bad.status_code == 422


async def test_live_stream_reconnects_with_last_event_id(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await api.register()
        (api.workspace / "a.txt").write_text("a")
        headers = {"Authorization": f"Bearer {api.key}"}
        received: list[dict[str, Any]] = []

        async def listen(last: int | None, count: int) -> None:
            h = dict(headers)
            if last is not None:
                h["Last-Event-ID"] = str(last)
            async with httpx.AsyncClient(base_url=base, timeout=30) as client, \
                    client.stream("GET", f"/v1/sessions/{sid}/events", headers=h) as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                buf = ""
                async for chunk in resp.aiter_text():
                    buf += chunk
                    if "\n\n" in buf.replace("\r\n", "\n"):
                        done, _, buf = buf.replace("\r\n", "\n").rpartition("\n\n")
                        received.extend(parse_sse(done))
                    if len(received) >= count:
                        return

        first = asyncio.create_task(listen(None, 2))
        await asyncio.sleep(0.2)
        r = await api.submit(sid, "read_file", {"path": "a.txt"}, call_id="toolu_l1", wait=20)
        assert r.status_code == 200
        await asyncio.wait_for(first, 20)
        assert [e["event"] for e in received] == ["tool.called", "tool.completed"]
        # Disconnected; more events happen; reconnect with Last-Event-ID.
        r = await api.submit(sid, "read_file", {"path": "a.txt"}, call_id="toolu_l2", wait=20)
        assert r.status_code == 200
        await asyncio.wait_for(listen(received[-1]["id"], 4), 20)
        assert [e["data"]["tool_use_id"] for e in received] == [
            "toolu_l1", "toolu_l1", "toolu_l2", "toolu_l2"]
        ids = [e["id"] for e in received]
        assert ids == sorted(set(ids))


async def test_stream_has_no_gap_under_concurrent_writers(
    dev_temporal: Client, repo: Repository, tmp_path: Path
) -> None:
    """Writers racing on one session (SQLite and PostgreSQL): the live stream sees
    every event exactly once, in seq order."""
    from parkgate.calls.events import ToolEvent

    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await api.register()
        total = 5 * 20
        received: list[int] = []

        async def listen() -> None:
            async with httpx.AsyncClient(base_url=base, timeout=60) as client, \
                    client.stream("GET", f"/v1/sessions/{sid}/events",
                                  headers={"Authorization": f"Bearer {api.key}"}) as resp:
                buf = ""
                async for chunk in resp.aiter_text():
                    buf += chunk.replace("\r\n", "\n")
                    if "\n\n" in buf:
                        done, _, buf = buf.rpartition("\n\n")
                        received.extend(e["id"] for e in parse_sse(done))
                    if len(received) >= total:
                        return

        async def writer(w: int) -> None:
            for i in range(20):
                await repo.apply([ToolEvent(
                    type="tool.called", session_id=sid, turn_id="t", tool_use_id=f"w{w}-{i}",
                    tool_name="probe",
                )])

        reader = asyncio.create_task(listen())
        await asyncio.sleep(0.2)
        await asyncio.gather(*(writer(w) for w in range(5)))
        await asyncio.wait_for(reader, 30)
        stored = [e.seq for e in await repo.events_after(sid, 0, limit=1000)]
        assert received == stored and len(stored) == total


async def test_confirmation_event_carries_a_link_the_store_never_holds(api: ApiRig) -> None:
    sid = await api.register()
    r = await api.submit(sid, "write_file", {"path": "x.txt", "content": "x"},
                         call_id="toolu_link", wait=0.5)
    assert r.status_code == 202, r.text
    parked = await api.wait_parked(sid, "toolu_link")
    url = f"/v1/sessions/{sid}/events"
    events = parse_sse((await api.http.get(url, params={"follow": "false"})).text)
    requested = [e for e in events if e["event"] == "tool.confirmation_requested"]
    assert len(requested) == 1
    assert requested[0]["data"]["approval_url"] == parked["approval_url"]
    timeline = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_link/events")).json()
    linked = [e for e in timeline["events"] if e["type"] == "tool.confirmation_requested"]
    assert linked[0]["approval_url"] == parked["approval_url"]
    # The token itself is nowhere in the stored history.
    token = parked["approval_url"].rsplit("/", 1)[1]
    stored = await api.repo.timeline(sid, "toolu_link")
    assert stored and all(token not in s.event.model_dump_json() for s in stored)
