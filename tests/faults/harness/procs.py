"""Subprocess management: each child leads its own process group, logs to a file,
and is killed (group-wide) on teardown or interpreter exit — no orphans."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

_LIVE: set[ManagedProcess] = set()


class ManagedProcess:
    """One real child process (and its process group)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        user: str | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.user = user
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # ------------------------------------------------------------------
    def start(self) -> ManagedProcess:
        """Spawn the process in a new session (its own process group)."""
        if self.running:
            raise RuntimeError(f"{self.name} already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"\n==== start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
        log.flush()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                user=self.user,
            )
        finally:
            log.close()
        self.starts += 1
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

    # ------------------------------------------------------------------
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

    # ------------------------------------------------------------------
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


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    user: str | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a short command to completion (bounded) and capture its output."""
    return subprocess.run(
        list(argv),
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=user,
        cwd=cwd,
        check=False,
    )


def kill_all() -> None:
    """SIGKILL every process group still alive (teardown and atexit safety net)."""
    for proc in list(_LIVE):
        proc.kill()


def wait_until_dead(pid: int, timeout: float = 10.0) -> bool:
    """True once no process has `pid` (for processes not started by us)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


atexit.register(kill_all)
