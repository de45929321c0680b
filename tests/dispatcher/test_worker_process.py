"""The runtime's worker subprocess: configured only by PARKGATE_* env, it polls
its task queue once ready, and SIGKILL ends it (and its group) at once."""

from __future__ import annotations

import signal
from pathlib import Path

from parkgate.runtime.devserver import DevServer
from parkgate.runtime.process import kill_all
from parkgate.runtime.worker_process import WorkerProcess
from tests.fixtures.temporal import dev_client, make_settings


async def test_worker_process_polls_then_dies_on_sigkill(
    dev_server: DevServer, sqlite_url: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(
        tmp_path / "data", workspace, database_url=sqlite_url, temporal_address=dev_server.address
    )
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        await worker.wait_ready(await dev_client(dev_server), timeout=90)
        assert worker.running
        worker.kill()
        assert not worker.running
        assert worker.returncode() == -signal.SIGKILL
    finally:
        worker.stop()
    kill_all()  # the session's dev server is not among the tracked processes
    assert dev_server.process is not None and dev_server.process.poll() is None
