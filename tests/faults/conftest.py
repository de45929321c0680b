"""Fixtures for the fault suite: a private PostgreSQL, a Temporal dev server and
a parkgate stack (workers + API) as real subprocesses — plus the closing
summary line.

CI mode is sized for the 5-minute budget on 2 cores; PARKGATE_SOAK=1 runs the
same scenarios larger, by hand.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import summary
from tests.faults.harness.postgres import PostgresUnavailable, PrivatePostgres
from tests.faults.harness.procs import kill_all
from tests.faults.harness.stack import Stack
from tests.faults.harness.temporal import DevServer

SOAK = os.environ.get("PARKGATE_SOAK", "") not in ("", "0", "false")


def scale(ci: int, soak: int) -> int:
    """A scenario size: `ci` normally, `soak` under PARKGATE_SOAK=1."""
    return soak if SOAK else ci


@pytest.fixture
def fault_root() -> Iterator[Path]:
    """A scratch directory per scenario (logs are kept on failure for reading)."""
    root = Path(tempfile.mkdtemp(prefix="parkgate-faults-"))
    yield root
    if os.environ.get("PARKGATE_FAULTS_KEEP"):
        print(f"fault scenario files kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A throwaway PostgreSQL cluster this test may stop and start at will."""
    try:
        pg = PrivatePostgres()
    except PostgresUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL required under CI=true: {exc}")
        pytest.skip(str(exc))
    with pg:
        yield pg


@pytest.fixture
async def devserver(fault_root: Path) -> AsyncIterator[DevServer]:
    """A Temporal dev server with file-backed state, killable and restartable."""
    server = DevServer(fault_root, log_dir=fault_root / "logs")
    try:
        await server.start()
        yield server
    finally:
        await server.stop()


StackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_stack(fault_root: Path, devserver: DevServer) -> AsyncIterator[StackFactory]:
    """Build and start a Stack against the scenario's dev server; always torn down."""
    stacks: list[Stack] = []

    async def factory(*, workers: int = 1, **kw: Any) -> Stack:
        stack = Stack(fault_root / f"stack{len(stacks)}", temporal_address=devserver.address, **kw)
        stacks.append(stack)
        await stack.start(workers=workers)
        return stack

    try:
        yield factory
    finally:
        for stack in stacks:
            await stack.stop()
        kill_all()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    """Print the suite's one summary line (once, whichever suite conftest runs first)."""
    line = summary.take_line_once()
    if line is not None:
        terminalreporter.write_line(line)
