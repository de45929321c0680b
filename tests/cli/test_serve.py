"""`parkgate serve` end to end, as a real process tree on free ports.

Start → banner with URLs and a key → /healthz → a write_file parks → SIGINT
stops everything (exit 0, no orphan) → start again → the call is still parked
→ `parkgate approve` runs it → the file exists.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from parkgate.runtime.ports import free_port
from tests.cli.conftest import parkgate_argv
from tests.fixtures.serve import Serve

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(300)]

@pytest.fixture
def serve_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    (tmp_path / "work").mkdir()
    env.update(
        PARKGATE_DATA_DIR=str(tmp_path / "data"),
        PARKGATE_WORKSPACE_ROOTS=f'["{tmp_path / "work"}"]',
        PYTHONUNBUFFERED="1",
        COLUMNS="200",
    )
    return env


@pytest.fixture
def started(serve_env: dict[str, str], tmp_path: Path) -> Iterator[list[Serve]]:
    """Every Serve a test starts is killed at the end, whatever happened."""
    runs: list[Serve] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            run.kill()


def _follow_events(base: str, headers: dict[str, str]) -> None:
    """Hold a session event stream open until the server closes it."""
    try:
        with httpx.stream(
            "GET",
            f"{base}/v1/sessions/s1/events",
            headers=headers,
            timeout=httpx.Timeout(5, read=None),
        ) as stream:
            for _ in stream.iter_lines():
                pass
    except httpx.HTTPError:
        pass


def _no_process_uses(data_dir: Path) -> list[str]:
    """Command lines of live processes that mention the data dir (the dev server)."""
    leftovers = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if str(data_dir) in cmd:
            leftovers.append(cmd)
    return leftovers


def _submit_until_parked(api: httpx.Client, turn_id: str, body: dict[str, object]) -> dict:
    """Submit a call that parks and return it once parked (a long-poll would
    wait its whole `wait`: a parked call is not finished)."""
    sub = api.post(f"/v1/sessions/s1/turns/{turn_id}/tool-calls", params={"wait": 0}, json=body)
    assert sub.status_code == 202, sub.text
    deadline = time.monotonic() + 30
    call = sub.json()
    while call["status"] != "parked" and time.monotonic() < deadline:
        time.sleep(0.1)
        call = api.get(f"/v1/sessions/s1/tool-calls/{body['id']}").json()
    assert call["status"] == "parked", call
    return dict(call)


@pytest.mark.slow
def test_serve_parks_survives_restart_and_approves(
    serve_env: dict[str, str], started: list[Serve], tmp_path: Path
) -> None:
    port = free_port()
    data_dir = Path(serve_env["PARKGATE_DATA_DIR"])
    work = tmp_path / "work"

    # A data directory others can read is made private at start-up.
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o755)
    (data_dir / "notes.txt").write_text("x")
    (data_dir / "notes.txt").chmod(0o644)
    first = Serve(serve_env, port, tmp_path / "serve-1.log")
    started.append(first)
    urls = first.wait_ready()
    assert urls["api"] == f"http://127.0.0.1:{port}"
    assert urls["audit"] == f"http://127.0.0.1:{port}/audit"
    assert (data_dir / "temporal.db").exists()
    assert (data_dir / "parkgate.db").exists()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    for name in ("temporal.db", "parkgate.db", "link-secret", "payload-key", "notes.txt"):
        assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600, name
    # What was exposed before the start is reported; files this start created are not.
    exposed = [ln for ln in first.text().splitlines() if "readable by others" in ln]
    assert any("notes.txt" in ln for ln in exposed), exposed
    assert not any(n in ln for ln in exposed for n in ("temporal", "parkgate.db")), exposed
    headers = {"Authorization": f"Bearer {urls['key']}"}

    twin = subprocess.run(
        [*parkgate_argv(), "serve", "--port", str(free_port())],
        env=serve_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert twin.returncode == 1
    errors = [ln for ln in twin.stderr.splitlines() if ln.startswith("parkgate: error:")]
    assert len(errors) == 1 and "already running" in errors[0], twin.stderr

    with httpx.Client(base_url=urls["api"], headers=headers, timeout=30) as api:
        assert api.get("/healthz").status_code == 200
        assert httpx.get(urls["ui"], timeout=10).status_code == 200
        reg = api.post("/v1/sessions", json={"session_id": "s1", "workspace_path": str(work)})
        assert reg.status_code in (200, 201), reg.text
        call = _submit_until_parked(api, "t1", {
            "id": "w1",
            "name": "write_file",
            "input": {"path": "out.txt", "content": "parked then approved\n"},
        })
        # The agent's key is never handed the link to its own gate.
        assert call["approval_url"] is None and call["request_id"]
        request_id = call["request_id"]

    # An open event stream must not hold the shutdown for uvicorn's grace period.
    watcher = threading.Thread(target=_follow_events, args=(urls["api"], headers), daemon=True)
    watcher.start()
    time.sleep(1.0)
    assert first.interrupt() == 0, first.text()
    assert "graceful shutdown exceeded" not in first.text()
    watcher.join(timeout=10)
    assert "stopped" in first.text()
    assert _no_process_uses(data_dir) == []
    assert not (work / "out.txt").exists()

    second = Serve(serve_env, port, tmp_path / "serve-2.log")
    started.append(second)
    first_key = headers["Authorization"].removeprefix("Bearer ")
    urls = second.wait_ready()
    assert urls["key"] == first_key  # the same pair at every start of a data directory
    headers = {"Authorization": f"Bearer {urls['key']}"}
    with httpx.Client(base_url=urls["api"], headers=headers, timeout=30) as api:
        again = api.get("/v1/sessions/s1/tool-calls/w1")
        assert again.status_code == 202, again.text  # not finished
        assert again.json()["status"] == "parked"

        decided = subprocess.run(
            # The shortened id `calls list` prints on a narrow terminal will do.
            [*parkgate_argv(), "approve", request_id[:10], "--reason", "fine", "--as", "tester"],
            env=serve_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert decided.returncode == 0, decided.stderr
        assert request_id in decided.stdout

        done = api.get("/v1/sessions/s1/tool-calls/w1", params={"wait": 30})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["status"] == "succeeded"
        assert body["decided_by"] == "tester"
        # deny and cancel from the terminal too
        for tool_use_id in ("w2", "w3"):
            parked = _submit_until_parked(api, "t2", {
                "id": tool_use_id,
                "name": "write_file",
                "input": {"path": f"{tool_use_id}.txt", "content": "no\n"},
            })
            if tool_use_id == "w2":
                args = ["deny", parked["request_id"], "--reason", "not today"]
            else:
                args = ["cancel", "s1", "w3"]
            proc = subprocess.run(
                [*parkgate_argv(), *args], env=serve_env, capture_output=True, text=True, timeout=60
            )
            assert proc.returncode == 0, proc.stderr
        denied = api.get("/v1/sessions/s1/tool-calls/w2", params={"wait": 30}).json()
        assert denied["status"] == "denied"
        assert "not today" in denied["result"]["content"][0]["text"]
        cancelled = api.get("/v1/sessions/s1/tool-calls/w3", params={"wait": 30}).json()
        assert cancelled["status"] == "cancelled"
    assert (work / "out.txt").read_text() == "parked then approved\n"
    assert not (work / "w2.txt").exists() and not (work / "w3.txt").exists()

    assert second.interrupt() == 0, second.text()
    assert _no_process_uses(data_dir) == []
    assert not (data_dir / "serve.json").exists()


def test_serve_refuses_a_busy_port(serve_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = subprocess.run(
            [*parkgate_argv(), "serve", "--port", str(port)],
            env=serve_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("parkgate: error:")]
    assert len(errors) == 1 and "already in use" in errors[0], proc.stderr


def _dev_servers_on(data_dir: Path) -> list[psutil.Process]:
    db = str(data_dir / "temporal.db")
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if "start-dev" in cmd and db in cmd:
            found.append(proc)
    return found


def _park(api_url: str, key: str, work: Path, tool_use_id: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api_url, headers=headers, timeout=30) as api:
        reg = api.post("/v1/sessions", json={"session_id": "s1", "workspace_path": str(work)})
        assert reg.status_code in (200, 201), reg.text
        parked = _submit_until_parked(api, "t1", {
            "id": tool_use_id, "name": "write_file",
            "input": {"path": f"{tool_use_id}.txt", "content": "kept\n"}})
        return str(parked["request_id"])


@pytest.mark.slow
def test_sigkilled_serve_leaves_nothing_and_restarts_with_one_dev_server(
    serve_env: dict[str, str], started: list[Serve], tmp_path: Path
) -> None:
    import asyncio

    from parkgate.runtime.devserver import DevServer

    port = free_port()
    data_dir = Path(serve_env["PARKGATE_DATA_DIR"])
    work = tmp_path / "work"
    first = Serve(serve_env, port, tmp_path / "serve-1.log")
    started.append(first)
    urls = first.wait_ready()
    request_id = _park(urls["api"], urls["key"], work, "k1")
    assert len(_dev_servers_on(data_dir)) == 1

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    _gone, alive = psutil.wait_procs(first.tree, timeout=20)
    for proc in alive:  # leave nothing behind even when the assert fails
        proc.kill()
    assert not alive, f"left behind by a SIGKILLed serve: {[p.cmdline() for p in alive]}"
    assert _dev_servers_on(data_dir) == []

    # A dev server a crash left behind (started outside serve, so it survives
    # its starter): the next serve stops it and starts exactly one of its own.
    orphan = DevServer(data_dir=data_dir)
    asyncio.run(orphan.start())
    assert orphan.process is not None
    orphan_pid = orphan.process.pid
    try:
        second = Serve(serve_env, port, tmp_path / "serve-2.log")
        started.append(second)
        urls = second.wait_ready()
        servers = _dev_servers_on(data_dir)
        assert [p.pid for p in servers] != [orphan_pid] and len(servers) == 1, servers
        assert orphan.process.poll() is not None
        decided = subprocess.run(
            [*parkgate_argv(), "approve", request_id, "--reason", "after a crash"],
            env=serve_env, capture_output=True, text=True, timeout=60,
        )
        assert decided.returncode == 0, decided.stderr
        headers = {"Authorization": f"Bearer {urls['key']}"}
        done = httpx.get(f"{urls['api']}/v1/sessions/s1/tool-calls/k1",
                         params={"wait": 30}, headers=headers, timeout=60)
        assert done.json()["status"] == "succeeded", done.text
        assert (work / "k1.txt").read_text() == "kept\n"
        assert second.interrupt() == 0, second.text()
    finally:
        if orphan.process.poll() is None:
            orphan.process.kill()
    assert _dev_servers_on(data_dir) == []
