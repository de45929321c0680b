"""`parkgate api`: the HTTP service against an external Temporal and database."""

from __future__ import annotations

import typer

from parkgate.cli.common import CliError, load_settings, notice, run


def register(app: typer.Typer) -> None:
    app.command("api")(api)


def api(
    host: str | None = typer.Option(
        None, "--host", help="Interface to bind (default: the api_host setting)."
    ),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="Port to bind (default: the api_port setting)."
    ),
    log_level: str = typer.Option(
        "info", "--log-level", help="uvicorn log level (debug, info, warning, error)."
    ),
    connect_timeout: float = typer.Option(
        60.0, "--connect-timeout", min=0, help="Seconds to keep retrying Temporal at start."
    ),
) -> None:
    """Serve the agent API, approval pages and audit pages until SIGTERM/Ctrl-C."""
    from parkgate.api.assemble import api_app
    from parkgate.runtime.embedded import StartupError, run_api
    from parkgate.runtime.malloc import limit_arenas

    limit_arenas()  # before the server's threads start: memory, see the module

    if log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    settings = load_settings()
    update: dict[str, object] = {}
    if host is not None:
        update["api_host"] = host
    if port is not None:
        update["api_port"] = port
    settings = settings.model_copy(update=update)

    def announce() -> None:
        notice(
            f"parkgate api: http://{settings.api_host}:{settings.api_port} (Temporal "
            f"{settings.temporal_address}, task queue {settings.temporal_task_queue!r})"
        )

    try:
        run(
            run_api(
                settings,
                api_app,
                log_level=log_level,
                connect_timeout=connect_timeout,
                announce=announce,
            )
        )
    except StartupError as exc:
        raise CliError(str(exc)) from exc
    notice("parkgate api: stopped")
