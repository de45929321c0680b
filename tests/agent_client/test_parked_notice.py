"""A gated call that waits for a human says so, once, and once more when it
goes on (issue 40): otherwise a waiting agent looks deadlocked. Against the
real API, worker, Temporal dev server and database."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.agent_client import AsyncParkgateClient, Notice, ParkgateClient, gate, tool_gate
from parkgate.store.repository import Repository
from tests.agent_client.test_gate import parked, sid, stack

LOGGER = "parkgate.agent_client"


def notice_lines(caplog: pytest.LogCaptureFixture, call_id: str) -> list[str]:
    """The WARNING lines of the client's logger naming `call_id`."""
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING and call_id in r.getMessage()]


async def test_a_parked_call_logs_once_with_the_inbox_and_once_when_it_resumes(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notices: list[Notice] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key, on_notice=notices.append) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        gates = tool_gate(agent, s, str(api.workspace))

        @gates.gate(side_effects="write")
        def deploy(target: str) -> str:
            """Deploy somewhere."""
            return f"deployed {target}"

        task = asyncio.create_task(deploy.call({"target": "prod"}, tool_use_id="n-park-1"))
        await parked(human, s, "n-park-1")
        request_id = (await human.get_call(s, "n-park-1")).request_id
        assert request_id
        for _ in range(100):  # the gate sees the parked status on its next read
            if notice_lines(caplog, "n-park-1"):
                break
            await asyncio.sleep(0.05)
        lines = notice_lines(caplog, "n-park-1")
        assert len(lines) == 1, lines
        assert "parked" in lines[0] and request_id in lines[0] and "deploy" in lines[0]
        assert f"{base}/inbox" in lines[0] and "/approve/" not in lines[0]
        assert [n.kind for n in notices] == ["parked"]
        assert notices[0] == Notice("parked", "deploy", "n-park-1", request_id,
                                    f"{base}/inbox", "parked")

        await human.decide(s, "n-park-1", "allow")
        result = await asyncio.wait_for(task, 60)
        assert result.text == "deployed prod"
    lines = notice_lines(caplog, "n-park-1")
    assert len(lines) == 2, lines  # parked once (not once per long-poll), resumed once
    assert "resumed" in lines[1] and request_id in lines[1]
    assert [n.kind for n in notices] == ["parked", "resumed"]
    assert notices[1].request_id == request_id


async def test_a_call_released_at_once_says_nothing(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    notices: list[Notice] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        s = sid()

        def agent_thread() -> str:
            with ParkgateClient(base, api.key, on_notice=notices.append) as pg:
                @gate(client=pg, session=s, side_effects="read", workspace=str(api.workspace))
                def look(path: str) -> str:
                    """Read something."""
                    return f"read {path}"

                return look.call({"path": "a"}, tool_use_id="n-read-1").text

        assert await asyncio.to_thread(agent_thread) == "read a"
    assert notice_lines(caplog, "n-read-1") == [] and notices == []
