"""`parkgate api`: the HTTP service against an external Temporal and database.

Its options are defined once, in `OPTIONS`: the typer command is built from
them (`register`, what `parkgate api --help` shows), and so is `run_argv`, the
path `parkgate.cli.main` takes for `parkgate api` with plain, valid options. A
long-running API then never imports typer and the CLI's root (docs/PERFORMANCE.md,
"At rest"); anything else (`--help`, a global option, a bad value) goes through
the typer command, which reports it as every command does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parkgate.cli.common import CliError, failed, load_settings, notice, run

if TYPE_CHECKING:
    import typer

#: The levels uvicorn takes for `--log-level`.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


@dataclass(frozen=True)
class Option:
    """One option of `parkgate api`: its flag, value type, default, bounds and help."""

    flag: str
    kind: type[str] | type[int] | type[float]
    default: Any
    help: str
    min: float | None = None
    max: float | None = None

    def parse(self, text: str) -> Any:
        """The value `text` gives, or None when typer would refuse it."""
        try:
            value: Any = self.kind(text)
        except ValueError:
            return None
        if (self.min is not None and value < self.min) or (
                self.max is not None and value > self.max):
            return None
        return value


#: `parkgate api`'s options, by parameter name (the order `--help` lists them).
OPTIONS: dict[str, Option] = {
    "host": Option("--host", str, None, "Interface to bind (default: the api_host setting)."),
    "port": Option("--port", int, None, "Port to bind (default: the api_port setting).",
                   min=1, max=65535),
    "log_level": Option("--log-level", str, "info",
                        "uvicorn log level (debug, info, warning, error)."),
    "connect_timeout": Option("--connect-timeout", float, 60.0,
                              "Seconds to keep retrying Temporal at start.", min=0),
}


def register(app: typer.Typer) -> None:
    app.command("api")(typer_command())


def typer_command() -> Callable[..., None]:
    """`api` with a signature of typer options made from OPTIONS."""
    import typer

    def api(**values: Any) -> None:
        """Serve the agent API, approval pages and audit pages until SIGTERM/Ctrl-C."""
        if values["log_level"] not in LOG_LEVELS:
            raise typer.BadParameter(f"unknown log level {values['log_level']!r}",
                                     param_hint="--log-level")
        serve(**values)

    api.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(opt.default, opt.flag, help=opt.help, min=opt.min,
                                 max=opt.max),
            annotation=opt.kind if opt.default is not None else opt.kind | None,
        )
        for name, opt in OPTIONS.items()
    ])
    return api


def parse_plain(args: Sequence[str]) -> dict[str, Any] | None:
    """OPTIONS' values from `args` (`--flag V` or `--flag=V`, the last one
    winning, as click takes them); None for anything else or a value the typer
    command would refuse."""
    by_flag = {opt.flag: name for name, opt in OPTIONS.items()}
    values = {name: opt.default for name, opt in OPTIONS.items()}
    rest = list(args)
    while rest:
        flag, eq, inline = rest.pop(0).partition("=")
        name = by_flag.get(flag)
        if name is None or (not eq and not rest):
            return None
        value = OPTIONS[name].parse(inline if eq else rest.pop(0))
        if value is None:
            return None
        values[name] = value
    return values if values["log_level"] in LOG_LEVELS else None


def run_argv(args: Sequence[str]) -> int | None:
    """Serve with the options `args` (after `api`) and return the exit status;
    None when they are not plain (`parse_plain`: the typer command handles them)."""
    values = parse_plain(args)
    if values is None:
        return None
    try:
        serve(**values)
    except (Exception, KeyboardInterrupt) as exc:
        return failed(exc)
    return 0


def serve(*, host: str | None, port: int | None, log_level: str,
          connect_timeout: float) -> None:
    """Serve until SIGTERM/Ctrl-C (`log_level` one of LOG_LEVELS)."""
    from parkgate.api.assemble import api_app
    from parkgate.runtime.embedded import StartupError, run_api
    from parkgate.runtime.malloc import limit_arenas

    limit_arenas()  # before the server's threads start: memory, see the module

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
