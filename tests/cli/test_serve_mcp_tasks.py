"""An MCP task outlives its client and `parkgate serve`: the official `mcp` SDK
client (protocol 2026-07-28, tasks extension) creates a task for a parked call
and disconnects; serve stops and starts again; a person signs in to the inbox
(the URL the task's status names) and approves; a new client connection polls
the same task id to the tool's result."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from parkgate.runtime.ports import free_port
from tests.api.test_inbox import decide as inbox_decide
from tests.api.test_inbox import login
from tests.api.test_mcp_tasks import create, get, official, poll_until
from tests.fixtures.serve import Serve, serve_environment

#: The protocol adopted without the discover probe: a loaded machine can take
#: over the SDK's 10 s probe timeout for serve's first MCP request (its MCP
#: modules load on first use), and the SDK then falls back to 2025-11-25. The
#: probe itself is tested in process (tests/api/test_mcp_tasks.py).
MODERN = "2026-07-28"

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_task_survives_a_serve_restart(tmp_path: Path) -> None:
    env = serve_environment(tmp_path)
    work = tmp_path / "work"
    port = free_port()
    runs: list[Serve] = []
    try:
        first = Serve(env, port, tmp_path / "serve-1.log")
        runs.append(first)
        urls = first.wait_ready()
        key, base = urls["key"], urls["api"]
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"},
                          timeout=30) as api:
            reg = api.post("/v1/sessions", json={"session_id": "s1", "workspace_path": str(work)})
            assert reg.status_code in (200, 201), reg.text

        async def start_task() -> str:
            async with official(base, "s1", key, MODERN) as mcp:
                made = await create(mcp, "write_file", {"path": "late.txt", "content": "ok\n"},
                                    "toolu_late")
                task_id: str = made.task_id  # type: ignore[union-attr]
                assert (await get(mcp, task_id)).status == "working"
                return task_id

        task_id = asyncio.run(start_task())
        assert first.interrupt() == 0, first.text()

        second = Serve(env, port, tmp_path / "serve-2.log")
        runs.append(second)
        assert second.wait_ready()["key"] == key

        async def still_working() -> str:
            async with official(base, "s1", key, MODERN) as mcp:
                task = await get(mcp, task_id)
                assert task.status == "working", task
                return task.status_message or ""

        message = asyncio.run(still_working())
        assert "parked for approval" in message and "/approve/" not in message
        request_id = message.split("(request ")[1].split(")")[0]
        inbox = message.split("in the inbox at ")[1].split(". ")[0]
        assert inbox == f"{base}/inbox"
        approver = re.search(r"PARKGATE_APPROVER_KEY=(\S+)", second.text())
        assert approver is not None, second.text()

        async def approve_in_the_inbox() -> None:
            async with httpx.AsyncClient(base_url=base, timeout=30) as browser:
                signed_in = await login(browser, approver.group(1))
                assert signed_in.status_code in (302, 303), signed_in.text[:500]
                decided = await inbox_decide(browser, request_id, "allow")
                assert decided.status_code in (200, 302, 303), decided.text[:500]

        asyncio.run(approve_in_the_inbox())

        async def result() -> None:
            async with official(base, "s1", key, MODERN) as mcp:
                done = await poll_until(mcp, task_id, "completed", "failed", "cancelled")
                assert done.status == "completed", done
                assert done.result is not None and not done.result.get("isError")

        asyncio.run(result())
        assert (work / "late.txt").read_text() == "ok\n"
        assert second.interrupt() == 0, second.text()
    finally:
        for run in runs:
            if run.proc.poll() is None:
                run.kill()
