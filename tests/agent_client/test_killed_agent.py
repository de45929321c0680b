"""An agent SIGKILLed before it ran a gated call (issue 36): restarted with the
same tool_use_id, it gets the call and runs it exactly once, within seconds of
the approval (not after a lease, never `outcome_unknown`); one approval.

A real agent process (`dying_agent`: `@gate` sync and async, Pydantic AI's
`gated_toolset`), killed with SIGKILL at each point before it could run the
call: while submitting, while parked (its long-poll still inside the API when
the call is approved), right after the approval, and holding a claim it had
not started. The real API on a socket, worker, Temporal dev server, SQLite.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.agent_client import AsyncParkgateClient, NotFoundError
from parkgate.store.repository import Repository
from tests.agent_client.test_gate import parked, sid, stack

ROOT = Path(__file__).resolve().parents[2]
#: The reservation window here: a restart that waited for the dead agent's
#: reservation to lapse (or its lease, 300 s, to end) would take longer than
#: RESTART_RUNS_WITHIN, which leaves room for a loaded machine (the agent
#: process's start-up included).
RESERVE_SECONDS = 600.0
RESTART_RUNS_WITHIN = 60.0


class Agent:
    """One agent process and the lines it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def spawn(cls, kind: str, base: str, key: str, session: str, tid: str, runs: Path,
                    workspace: Path, pause: str = "none") -> Agent:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.agent_client.dying_agent", kind, base, key, session,
            tid, str(runs), str(workspace), pause, cwd=ROOT, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        return cls(proc)

    async def go(self) -> None:
        """Let it make its call (it has imported what it needs)."""
        await self.expect("READY", timeout=120)
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()

    async def expect(self, prefix: str, timeout: float = 60) -> str:
        """The next line starting with `prefix` (others are skipped)."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"the agent exited before {prefix!r}")
                if line.startswith(prefix):
                    return line.strip()

    async def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        await self.proc.wait()


async def _status(client: AsyncParkgateClient, session: str, tid: str) -> str | None:
    try:
        return (await client.get_call(session, tid)).status.value
    except NotFoundError:
        return None


async def _approve(human: AsyncParkgateClient, session: str, tid: str) -> None:
    await parked(human, session, tid)
    await human.decide(session, tid, "allow")


POINTS = ["submitting", "parked", "approved", "reserved"]
#: Every point with the async gate; the sync gate and Pydantic AI's toolset
#: where their code differs (the blocking driver, the adapter's executor).
CASES = [("async", p) for p in POINTS] + [("sync", "parked"), ("sync", "reserved"),
                                          ("pydantic", "parked"), ("pydantic", "reserved")]


@pytest.mark.slow
async def test_an_agent_killed_before_it_ran_the_call_runs_it_once_on_restart(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """Every case at once (each its own session and processes): the machine's
    time goes to the agents' start-up, which they share."""
    async with stack(dev_temporal, sqlite_repo, tmp_path,
                     client_reserve_seconds=RESERVE_SECONDS) as (api, base), \
            AsyncParkgateClient(base, api.human_key) as human:

        async def case(kind: str, point: str) -> None:
            runs = tmp_path / f"runs-{kind}-{point}"
            s, tid = sid(), f"k-{uuid.uuid4().hex[:8]}"

            async def agent(pause: str = "none") -> Agent:
                return await Agent.spawn(kind, base, api.key, s, tid, runs, api.workspace, pause)

            first = await agent("reserved" if point == "reserved" else "none")
            second = await agent()  # the restart, started early (its imports are not timed)
            await first.go()
            await first.expect("SUBMITTING")
            if point == "submitting":
                await first.kill()  # its submit may or may not have reached parkgate
            elif point == "parked":
                await parked(human, s, tid)
                await first.kill()
                await human.decide(s, tid, "allow")  # its long-poll is still in the API
            elif point == "approved":
                await _approve(human, s, tid)
                await first.kill()
            else:
                await _approve(human, s, tid)
                await first.expect("RESERVED")  # it holds the claim, not started
                await first.kill()
                assert await _status(human, s, tid) == "claimed"
            assert not runs.exists(), (kind, point)

            approved = time.monotonic()
            await second.go()
            if point == "submitting":
                await _approve(human, s, tid)
                approved = time.monotonic()
            result = await second.expect("RESULT", timeout=RESTART_RUNS_WITHIN * 2)
            took = time.monotonic() - approved
            await second.proc.wait()
            assert result.startswith("RESULT False") and "wrote deploy once" in result, \
                (kind, point, result)
            assert runs.read_text() == "deploy once\n", (kind, point)  # exactly once
            assert took < RESTART_RUNS_WITHIN, (kind, point, took)
            row = await human.get_call(s, tid)
            assert row.status.value == "succeeded", (kind, point, row)
            meaning = await api.repo.verify_meaning(s)
            assert meaning.ok, (kind, point, [p.describe() for p in meaning.problems])

        await asyncio.gather(*(case(kind, point) for kind, point in CASES))
