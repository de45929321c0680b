"""Agents outlast an operator's restart: real `parkgate serve`, stopped for 30 s
(the issue's number) and started again while a sync and an async client wait on
parked calls. Both get their result; each tool ran once. While the server is
down, a call with a timeout of its own gives up with UnavailableError."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from parkgate.agent_client import AsyncParkgateClient, ParkgateClient, UnavailableError
from parkgate.models import ToolResultBlock
from parkgate.runtime.ports import free_port
from tests.cli.conftest import parkgate_argv
from tests.fixtures.serve import Serve, serve_environment

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(300)]

#: How long the server stays down (an operator's restart, as the issue measures it).
OUTAGE_SECONDS = 30.0


def _shell(tool_use_id: str) -> dict[str, Any]:
    """A call that leaves one line per run in the workspace."""
    return {"id": tool_use_id, "name": "shell",
            "input": {"command": f"echo ran >> {tool_use_id}.log"}}


def _parked(api: str, key: str, tool_use_id: str) -> str:
    """The request id once the call is parked."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = httpx.get(f"{api}/v1/sessions/s1/tool-calls/{tool_use_id}",
                      headers={"Authorization": f"Bearer {key}"}, timeout=10)
        if r.status_code < 300 and r.json()["status"] == "parked":
            return str(r.json()["request_id"])
        time.sleep(0.2)
    pytest.fail(f"{tool_use_id} never parked")


@pytest.mark.slow
def test_clients_wait_through_a_restart_and_the_tools_run_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="parkgate.agent_client")
    env = serve_environment(tmp_path)
    work = tmp_path / "work"
    port = free_port()
    runs: list[Serve] = []
    results: dict[str, ToolResultBlock | BaseException] = {}

    def sync_agent(api: str, key: str) -> None:
        try:
            with ParkgateClient(api, key) as gate:
                results["sync"] = gate.dispatch(_shell("sync1"), "s1")
        except BaseException as exc:  # reported by the assertions below
            results["sync"] = exc

    def async_agent(api: str, key: str) -> None:
        async def go() -> ToolResultBlock:
            async with AsyncParkgateClient(api, key) as gate:
                return await gate.dispatch(_shell("async1"), "s1")
        try:
            results["async"] = asyncio.run(go())
        except BaseException as exc:
            results["async"] = exc

    try:
        first = Serve(env, port, tmp_path / "serve-1.log")
        runs.append(first)
        urls = first.wait_ready()
        api, key = urls["api"], urls["key"]
        with ParkgateClient(api, key) as gate:
            gate.register_session("s1", str(work))
        agents = [threading.Thread(target=sync_agent, args=(api, key), daemon=True),
                  threading.Thread(target=async_agent, args=(api, key), daemon=True)]
        for agent in agents:
            agent.start()
        request_ids = [_parked(api, key, t) for t in ("sync1", "async1")]

        assert first.interrupt() == 0, first.text()
        # Down: a call bounded by its own timeout (or by retry_for) gives up, typed.
        with ParkgateClient(api, key, retry_for=1.0) as impatient:
            with pytest.raises(UnavailableError) as down:
                impatient.get_call("s1", "sync1")
            assert down.value.code == "unreachable" and api in down.value.message
            with pytest.raises(UnavailableError):
                impatient.dispatch(_shell("never"), "s1", timeout=2.0)
        time.sleep(OUTAGE_SECONDS)
        assert all(agent.is_alive() for agent in agents), results

        second = Serve(env, port, tmp_path / "serve-2.log")
        runs.append(second)
        second.wait_ready()
        for request_id in request_ids:
            decided = subprocess.run(
                [*parkgate_argv(), "approve", request_id, "--reason", "after the restart"],
                env=env, capture_output=True, text=True, timeout=60)
            assert decided.returncode == 0, decided.stderr
        for agent in agents:
            agent.join(timeout=120)
        assert second.interrupt() == 0, second.text()
    finally:
        for run in runs:
            if run.proc.poll() is None:
                run.kill()

    for name in ("sync", "async"):
        result = results[name]
        assert isinstance(result, ToolResultBlock), f"{name}: {result!r}"
        assert not result.is_error, result.text
        assert (work / f"{name}1.log").read_text() == "ran\n"  # ran once
    assert not (work / "never.log").exists()
    outages = [r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING and "unavailable" in r.getMessage()
               and "retrying" in r.getMessage()]
    assert outages and all(api in line for line in outages), outages
