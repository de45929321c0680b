"""Child processes that cannot outlive their owner: each leads its own process
group, logs to a file, and is stopped (SIGTERM, then SIGKILL, group-wide) on
request or killed by `kill_all()`.

The dev server and the worker subprocesses of the bench and the tests are
ManagedProcesses; the fault suite SIGKILLs them to simulate crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_LIVE: set[ManagedProcess] = set()


class ManagedProcess:
    """One real child process (and its process group), output appended to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_dir: Path | None = None,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        user: str | None = None,
        preexec_fn: Callable[[], None] | None = None,
        umask: int = -1,
        track: bool = True,
    ) -> None:
        if log_path is None:
            if log_dir is None:
                raise ValueError("a ManagedProcess needs log_dir or log_path")
            log_path = log_dir / f"{name}.log"
        self.name = name
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.user = user
        self.preexec_fn = preexec_fn
        self.umask = umask
        self.log_path = log_path
        #: Whether `kill_all()` may kill it (a session-wide dev server must not
        #: die in one scenario's teardown).
        self.track = track
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> ManagedProcess:
        """Spawn the process in a new session (its own process group)."""
        if self.running:
            raise RuntimeError(f"{self.name} already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Logs may hold tool output: private from birth.
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with open(fd, "ab") as log:
            log.write(f"\n==== start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                user=self.user,
                preexec_fn=self.preexec_fn,
                umask=self.umask,
            )
        self.starts += 1
        if self.track:
            _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def signal_group(self, sig: int) -> None:
        """Send `sig` to the whole process group (children included)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the group now and reap the leader (a crash, not a shutdown)."""
        if self.proc is None:
            return
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        _LIVE.discard(self)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait up to `timeout` s, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Whatever else is left in the group (grandchildren) goes too.
        self.signal_group(signal.SIGKILL)
        _LIVE.discard(self)
        return self.proc.returncode

    async def akill(self) -> None:
        await asyncio.to_thread(self.kill)

    async def astop(self, timeout: float = 15.0) -> int | None:
        return await asyncio.to_thread(self.stop, timeout)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the process's output, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def assert_alive(self) -> None:
        if not self.running:
            raise RuntimeError(
                f"{self.name} exited with {self.returncode()}:\n{self.log_tail()}"
            )

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid}>"


def kill_all() -> None:
    """SIGKILL every tracked process group still alive (teardown safety net)."""
    for proc in list(_LIVE):
        proc.kill()
