"""`parkgate worker`: one Temporal worker against an external Temporal and database.

Stateless: run as many as you like (`docker compose up --scale worker=N`).
(`dispatcher/runtime/worker.py` is the worker recipe; this module is only its command.)
"""

from __future__ import annotations

import typer

from parkgate.cli.common import CliError, err_console, load_settings, run
from parkgate.cli.policy import require_valid_policies


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    connect_timeout: float = typer.Option(
        60.0, "--connect-timeout", min=0, help="Seconds to keep retrying Temporal at start."
    ),
) -> None:
    """Run a worker (classification, approvals, tool execution) until SIGTERM/Ctrl-C."""
    from parkgate.runtime.embedded import StartupError, run_worker
    from parkgate.runtime.malloc import limit_arenas
    from parkgate.workspaces.worker_groups import served_queues

    limit_arenas()  # before the worker's threads start: memory, see the module
    settings = load_settings()
    require_valid_policies(settings)

    def announce() -> None:
        queues = served_queues(
            settings.temporal_task_queue, settings.serve_groups, main=settings.serve_main_queue
        )
        plural = "s" if len(queues) > 1 else ""
        err_console.print(
            f"parkgate worker: task queue{plural} {', '.join(map(repr, queues))} on "
            f"{settings.temporal_address} (namespace {settings.temporal_namespace!r})"
        )

    try:
        run(run_worker(settings, connect_timeout=connect_timeout, announce=announce))
    except StartupError as exc:
        raise CliError(str(exc)) from exc
    err_console.print("parkgate worker: stopped")
