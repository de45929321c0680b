"""The parkgate processes under attack: workers and the API as real subprocesses
(`parkgate worker`, `parkgate api`), configured only through PARKGATE_* env,
talking to a Temporal dev server and a database the harness controls."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.runtime.ports import free_port, wait_port_async
from parkgate.runtime.process import ManagedProcess
from parkgate.runtime.worker_process import WorkerProcess, settings_env
from tests.fixtures.temporal import TEST_PAYLOAD_KEY_ID, TEST_PAYLOAD_KEYS

#: Runs the `parkgate` console script's entry point with this interpreter (no
#: reliance on the script being installed on PATH).
CLI = [sys.executable, "-c", "from parkgate.cli import main; main()"]

#: The project root, put on PYTHONPATH so children import this checkout's code
#: whether or not it is pip-installed.
PROJECT_ROOT = Path(__file__).resolve().parents[3]

#: Seconds a worker/API gets to come up; generous for a loaded 2-core machine.
START_TIMEOUT = 60.0


def fault_policy(trusted: Path) -> dict[str, Any]:
    """The confirmation policy the fault scenarios run under.

    Side effects prompt everywhere except in the `trusted` workspace, where
    WRITE and EXECUTE run at once: so one tool (shell) gives both auto-run and
    parked calls, each leaving a countable marker.
    """
    return {
        "default": {
            "NONE": "auto",
            "READ": "auto",
            "WRITE": "prompt",
            "EXECUTE": "prompt",
            "NETWORK": "prompt",
        },
        "trusted_workspaces": [str(trusted)],
        "trusted_workspace_overrides": {"WRITE": "auto", "EXECUTE": "auto"},
    }


class Stack:
    """Workers + API for one scenario; every process is a ManagedProcess."""

    def __init__(
        self,
        root: Path,
        *,
        temporal_address: str,
        database_url: str | None = None,
        policy: dict[str, Any] | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.data_dir = root / "data"
        self.log_dir = root / "logs"
        self.workspaces = root / "ws"
        for path in (self.data_dir, self.log_dir, self.workspaces):
            path.mkdir(parents=True, exist_ok=True)
        self.trusted = self.workspace("trusted")
        self.untrusted = self.workspace("untrusted")
        self.api_port = free_port()
        self.task_queue = f"parkgate-faults-{secrets.token_hex(4)}"
        self.database_url = database_url or f"sqlite+aiosqlite:///{self.data_dir / 'history.db'}"
        self.temporal_address = temporal_address
        self.policy = policy if policy is not None else fault_policy(self.trusted)
        self.extra_env = dict(extra_env or {})
        self.workers: list[WorkerProcess] = []
        self._worker_seq = 0
        self._temporal: Client | None = None
        # First seen polling, per worker (start_worker makes one per process; a pid can recur).
        self._serving_since: dict[WorkerProcess, float] = {}
        self.api: ManagedProcess | None = None
        self.api_key: str | None = None
        #: A human's key (approver + auditor) for reads and decisions.
        self.human_key: str | None = None
        self.faults = 0

    # ------------------------------------------------------------------
    def workspace(self, name: str) -> Path:
        """A workspace dir (resolved) with a `markers/` subdir for run markers."""
        path = (self.workspaces / name).resolve()
        (path / "markers").mkdir(parents=True, exist_ok=True)
        return path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        """A clean environment: no inherited PARKGATE_* settings, only ours."""
        return settings_env(
            extra={
                "PARKGATE_DATA_DIR": str(self.data_dir),
                "PARKGATE_DATABASE_URL": self.database_url,
                "PARKGATE_TEMPORAL_ADDRESS": self.temporal_address,
                "PARKGATE_TEMPORAL_TASK_QUEUE": self.task_queue,
                "PARKGATE_API_HOST": "127.0.0.1",
                "PARKGATE_API_PORT": str(self.api_port),
                "PARKGATE_PUBLIC_BASE_URL": self.base_url,
                "PARKGATE_LINK_SECRET": "faults-" + "s" * 40,
                # The test key, so `histories.py` can export what the stack wrote.
                "PARKGATE_PAYLOAD_KEYS": json.dumps(TEST_PAYLOAD_KEYS),
                "PARKGATE_PAYLOAD_KEY_ID": TEST_PAYLOAD_KEY_ID,
                "PARKGATE_WORKSPACE_ROOTS": json.dumps([str(self.workspaces.resolve())]),
                "PARKGATE_TOOL_CONFIRMATION": json.dumps(self.policy),
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
                ),
                **self.extra_env,
            }
        )

    # ------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run one `parkgate ...` command against this stack (bounded)."""
        return subprocess.run(
            [*CLI, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )

    async def acli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(self.cli, *args, timeout=timeout)

    def must(self, *args: str, timeout: float = 120.0) -> str:
        res = self.cli(*args, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(
                f"parkgate {' '.join(args)} exited {res.returncode}:\n{res.stderr}\n{res.stdout}"
            )
        return res.stdout

    def migrate(self) -> None:
        self.must("db", "upgrade")

    def create_api_key(self, name: str = "faults") -> str:
        """`parkgate keys create --name NAME` for the agent (agent + auditor) and
        for a human (approver + auditor): the agent never decides its own calls."""
        out = self.must("keys", "create", "--name", name, "--role", "agent", "--role", "auditor")
        key = parse_key(out)
        self.api_key = key
        human = self.must("keys", "create", "--name", f"{name}-human",
                          "--role", "approver", "--role", "auditor")
        self.human_key = parse_key(human)
        return key

    # ------------------------------------------------------------------
    def start_worker(self) -> WorkerProcess:
        """`parkgate worker` (the CLI's entry to the one worker recipe) as a subprocess."""
        self._worker_seq += 1
        name = f"worker-{self._worker_seq}"
        proc = WorkerProcess(
            None, self.log_dir / f"{name}.log", argv=[*CLI, "worker"], env=self.env(),
            cwd=self.root, name=name,
        )
        proc.start()
        self.workers.append(proc)
        return proc

    def live_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.running]

    async def serving_workers(self, served_for: float = 0.0) -> list[WorkerProcess]:
        """Live workers that poll the scenario's task queue, seen polling at least
        `served_for` s ago: a worker still starting (importing, connecting) is
        alive but serves nothing yet, and one killed the moment it polls has
        served next to nothing."""
        if self._temporal is None:
            self._temporal = await Client.connect(self.temporal_address)
        now = time.monotonic()
        serving = []
        for worker in self.live_workers():
            if await worker.polling(self._temporal, self.task_queue):
                since = self._serving_since.setdefault(worker, now)
                if now - since >= served_for:
                    serving.append(worker)
        return serving

    async def kill_worker(self, proc: ManagedProcess) -> None:
        """SIGKILL one worker (and its tool subprocesses): a crash, not a shutdown."""
        await proc.akill()
        self.faults += 1

    async def start_api(self) -> ManagedProcess:
        if self.api is None:
            self.api = ManagedProcess(
                "api", [*CLI, "api", "--host", "127.0.0.1", "--port", str(self.api_port)],
                log_dir=self.log_dir, env=self.env(), cwd=self.root,
            )
        self.api.start()
        await self.wait_api()
        return self.api

    async def wait_api(self, timeout: float = START_TIMEOUT) -> None:
        assert self.api is not None
        try:
            await wait_port_async(self.api_port, timeout)
        except TimeoutError:
            self.api.assert_alive()
            raise
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as client:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                self.api.assert_alive()
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"API not healthy after {timeout:.0f}s")
                await asyncio.sleep(0.2)

    async def restart_api(self, *, kill: bool) -> None:
        """SIGKILL (crash) or SIGTERM (deploy) the API, then start it on the same port."""
        assert self.api is not None
        if kill:
            await self.api.akill()
        else:
            await self.api.astop()
        self.faults += 1
        await self.start_api()

    async def start(self, workers: int = 1) -> None:
        """Migrate, mint an API key, start workers and the API."""
        await asyncio.to_thread(self.migrate)
        await asyncio.to_thread(self.create_api_key)
        for _ in range(workers):
            self.start_worker()
        await self.start_api()

    async def stop(self) -> None:
        procs = [*self.workers, *([self.api] if self.api else [])]
        await asyncio.gather(*(p.astop(timeout=10) for p in procs))

    def logs(self, lines: int = 30) -> str:
        """Tails of every process log, for assertion messages."""
        procs = [*self.workers, *([self.api] if self.api else [])]
        return "\n".join(f"--- {p.name}\n{p.log_tail(lines)}" for p in procs)

    def api_tracebacks(self, limit: int = 3) -> str:
        """The API's logged unhandled errors with their tracebacks, for 5xx failures."""
        if self.api is None:
            return ""
        try:
            text = self.api.log_path.read_text(errors="replace")
        except OSError:
            return ""
        blocks = text.split("unhandled error")[1 : limit + 1]
        return "\n".join("unhandled error" + "\n".join(b.splitlines()[:60]) for b in blocks)


_KEY_RE = re.compile(r"[A-Za-z0-9_\-\.]{24,}")


def parse_key(output: str) -> str:
    """The API key printed by `parkgate keys create` (the longest token-looking word)."""
    candidates = _KEY_RE.findall(output)
    if not candidates:
        raise ValueError(f"no API key in `keys create` output: {output!r}")
    return max(candidates, key=len)
