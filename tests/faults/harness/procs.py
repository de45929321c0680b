"""Subprocess management: each child leads its own process group, logs to a file,
and is killed (group-wide) on teardown or interpreter exit — no orphans.

`ManagedProcess` and `kill_all` are the runtime's (parkgate.runtime.process)."""

from __future__ import annotations

import atexit
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from parkgate.runtime.process import ManagedProcess, kill_all

__all__ = ["ManagedProcess", "kill_all", "run", "wait_until_dead"]

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
