"""`parkgate api` and `parkgate worker` as separate processes (the production shape)
against a real Temporal dev server and a SQLite history."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from parkgate.runtime.devserver import DevServer
from parkgate.runtime.ports import free_port
from tests.cli.conftest import parkgate_argv


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env.update(
        PARKGATE_DATA_DIR=str(tmp_path / "data"),
        PARKGATE_WORKSPACE_ROOTS=f'["{work}"]',
        PARKGATE_TEMPORAL_TASK_QUEUE=f"cli-parts-{os.getpid()}-{time.monotonic_ns()}",
        PARKGATE_LINK_SECRET="cli-parts-secret-" + "x" * 32,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*parkgate_argv(), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _error_line(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("parkgate: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def test_api_refuses_an_unmigrated_database(tmp_path: Path) -> None:
    proc = _cli(_env(tmp_path), "api", "--port", str(free_port()))
    assert proc.returncode == 1
    assert "parkgate db upgrade" in _error_line(proc.stderr)


def test_worker_reports_an_unreachable_temporal(tmp_path: Path) -> None:
    env = _env(tmp_path, PARKGATE_TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    assert _cli(env, "db", "upgrade").returncode == 0
    started = time.monotonic()
    proc = _cli(env, "worker", "--connect-timeout", "1")
    assert proc.returncode == 1
    assert "cannot reach Temporal" in _error_line(proc.stderr)
    assert time.monotonic() - started < 30


def _spawn(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [*parkgate_argv(), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_worker_stops_on_sigterm_while_waiting_for_temporal(tmp_path: Path) -> None:
    env = _env(tmp_path, PARKGATE_TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")
    assert _cli(env, "db", "upgrade").returncode == 0
    log = tmp_path / "worker.log"
    proc = _spawn(env, log, "worker", "--connect-timeout", "120")
    try:
        deadline = time.monotonic() + 60
        while "parkgate worker: task queue" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "worker never started"
            time.sleep(0.1)
        time.sleep(1.0)  # signal handlers are installed before the line is printed
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    running: list[subprocess.Popen[bytes]] = []
    yield running
    for proc in running:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.devserver
@pytest.mark.timeout(240)
async def test_api_and_worker_processes_run_a_call(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    async with DevServer(data_dir=tmp_path / "temporal") as dev:
        port = free_port()
        env = _env(
            tmp_path,
            PARKGATE_TEMPORAL_ADDRESS=dev.address,
            PARKGATE_PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
        )
        assert _cli(env, "db", "upgrade").returncode == 0
        created = _cli(env, "keys", "create", "--name", "parts")
        assert created.returncode == 0, created.stderr
        key = created.stdout.strip().splitlines()[-1]
        logs = tmp_path / "logs"
        logs.mkdir()
        for name, args in (("worker", ["worker"]), ("api", ["api", "--port", str(port)])):
            procs.append(_spawn(env, logs / f"{name}.log", *args))
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as api:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await api.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert all(p.poll() is None for p in procs), (logs / "api.log").read_text()
                assert time.monotonic() < deadline, "API did not come up"
                await asyncio.sleep(0.2)
            work = tmp_path / "work"
            (work / "note.txt").write_text("read me\n")
            reg = await api.post(
                "/v1/sessions", json={"session_id": "p1", "workspace_path": str(work)}
            )
            assert reg.status_code in (200, 201), reg.text
            res = await api.post(
                "/v1/sessions/p1/turns/t1/tool-calls",
                params={"wait": 30},
                json={"id": "r1", "name": "read_file", "input": {"path": "note.txt"}},
            )
            assert res.status_code == 200, res.text
            body = res.json()
            assert body["status"] == "succeeded"
            assert "read me" in body["result"]["content"][0]["text"]

        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=60) for proc in procs]
        assert codes == [0, 0], [(logs / n).read_text()[-2000:] for n in ("worker.log", "api.log")]
