"""The API and worker processes at rest: resident memory and modules imported
before they have served anything (issue 41 item 5, part of the scale phase).

Each runs as production runs it (`parkgate api`, `python -m parkgate.runtime.worker`)
with only PARKGATE_* settings, plus PYTHONPROFILEIMPORTTIME=1: the interpreter
writes one `import time:` line to the process's log per module it imports, so
counting them after the process is up (the API healthy, the worker polling)
is the number of modules it loaded to get there (less the few loaded through
`importlib.import_module`, which the interpreter does not log). Imports after
that point (a first request loading an integration) are not counted here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from bench.report import Report, Row
from parkgate.runtime.ports import LOCALHOST, free_port
from parkgate.runtime.process import ManagedProcess
from parkgate.runtime.worker_process import WorkerProcess, settings_env
from parkgate.settings import Settings

MB = 2**20
#: Issue 41's target for the API process at rest.
API_REST_LIMIT_MB = 100.0
#: What the interpreter writes per imported module under PYTHONPROFILEIMPORTTIME.
IMPORT_LINE = "import time:"
PROFILE_ENV = {"PYTHONPROFILEIMPORTTIME": "1"}
API_ROW = "API RSS at rest (healthy, nothing served)"
WORKER_ROW = "worker RSS at rest (polling, nothing run)"


@dataclass(frozen=True)
class AtRest:
    """One process, up and idle."""

    rss_mb: float
    modules: int


def imported(log: Path) -> int:
    """The modules a process started under PYTHONPROFILEIMPORTTIME has imported so
    far: its log's `import time:` lines, less the column header."""
    lines = log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines
               if line.startswith(IMPORT_LINE) and not line.rstrip().endswith("package"))


async def api_at_rest(root: Path, settings: Settings, argv: list[str]) -> AtRest:
    """`parkgate api` (`argv`) started, healthy, idle for a second, then stopped."""
    from bench.scale import _wait_healthy, rss_mb  # the scale phase imports this module

    port = free_port(LOCALHOST)
    base = f"http://{LOCALHOST}:{port}"
    log = root / "rest-api.log"
    log.unlink(missing_ok=True)  # count this run's imports only
    proc = ManagedProcess(
        "rest-api", [*argv, "--host", LOCALHOST, "--port", str(port), "--log-level", "warning"],
        log_path=log, env=settings_env(settings.model_copy(update={"public_base_url": base}),
                                       PROFILE_ENV),
        cwd=root,
    ).start()
    try:
        await _wait_healthy(proc, base)
        await asyncio.sleep(1.0)
        return AtRest(rss_mb(proc.pid), imported(log))
    finally:
        await proc.astop()


async def worker_at_rest(root: Path, settings: Settings, client: Client) -> AtRest:
    """`python -m parkgate.runtime.worker` started, polling, idle for a second, stopped."""
    from bench.scale import rss_mb  # the scale phase imports this module

    log = root / "rest-worker.log"
    log.unlink(missing_ok=True)
    worker = WorkerProcess(settings, log, env=settings_env(settings, PROFILE_ENV)).start()
    try:
        await worker.wait_ready(client)
        await asyncio.sleep(1.0)
        return AtRest(rss_mb(worker.pid), imported(log))
    finally:
        await worker.astop()


def add_rows(report: Report, api: AtRest, worker: AtRest | None) -> None:
    """The table's rows: each process's RSS and modules at rest."""
    report.add(Row("scale", API_ROW,
                   value=round(api.rss_mb, 1), unit="MB",
                   target=f"< {API_REST_LIMIT_MB:g} MB", met=api.rss_mb < API_REST_LIMIT_MB,
                   note=f"{api.modules} modules imported (-X importtime)"))
    if worker is not None:
        report.add(Row("scale", WORKER_ROW,
                       value=round(worker.rss_mb, 1), unit="MB",
                       note=f"{worker.modules} modules imported (-X importtime)"))
