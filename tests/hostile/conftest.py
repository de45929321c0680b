"""Hostile-input tests: one real stack (dev server, worker, API as subprocesses)
shared by the module, and the fault suite's tally and summary line."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import summary
from tests.faults.harness.postgres import PostgresUnavailable, PrivatePostgres
from tests.faults.harness.procs import kill_all
from tests.faults.harness.stack import Stack
from tests.faults.harness.temporal import DevServer

#: Small body limit so oversize tests stay cheap.
MAX_REQUEST_BYTES = 256 * 1024
#: WRITE approvals expire quickly here so an expired link can be tested for real.
WRITE_EXPIRY_SECONDS = 4


@pytest.fixture(scope="session")
async def hostile_stack() -> AsyncIterator[Stack]:
    """Dev server + worker + API on a private PostgreSQL (Postgres is what
    production runs, and it is stricter than SQLite about hostile text such as
    NUL bytes); SQLite when no PostgreSQL binaries exist outside CI."""
    root = Path(tempfile.mkdtemp(prefix="parkgate-hostile-"))
    server = DevServer(root, log_dir=root / "logs")
    stack: Stack | None = None
    pg: PrivatePostgres | None = None
    try:
        try:
            pg = PrivatePostgres().init()
        except PostgresUnavailable as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"PostgreSQL required under CI=true: {exc}")
        await server.start()
        stack = Stack(
            root / "stack",
            temporal_address=server.address,
            database_url=pg.url if pg else None,
            extra_env={
                "PARKGATE_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
                "PARKGATE_APPROVAL_EXPIRY_BY_CLASS": json.dumps({"write": WRITE_EXPIRY_SECONDS}),
                "PARKGATE_AUDIT_PAGES_ENABLED": "true",
            },
        )
        await stack.start(workers=1)
        yield stack
    finally:
        if stack is not None:
            await stack.stop()
        await server.stop()
        kill_all()
        if pg is not None:
            pg.destroy()
        shutil.rmtree(root, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    line = summary.take_line_once()
    if line is not None:
        terminalreporter.write_line(line)
