"""Shared CLI plumbing: one-line errors, settings loading, async runner, consoles.

Every command reports a problem the same way: one line on stderr and a
non-zero exit code (2 for a bad argument or configuration, 1 for a runtime
failure such as an unreachable database). `CliError` carries both.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from parkgate.settings import Settings, get_settings

if TYPE_CHECKING:
    from rich.console import Console

    from parkgate.calls.records import CallStatus
    from parkgate.store import Repository

    console: Console
    err_console: Console

T = TypeVar("T")


def __getattr__(name: str) -> Any:
    """`console` (tables and progress, stdout) and `err_console` (errors and notices,
    stderr), made when first imported: rich is ~40 modules and 1.3 MB that a
    long-running `parkgate api` would hold for nothing (it writes with `notice`)."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    globals().update(
        console=Console(highlight=False, soft_wrap=False),
        err_console=Console(stderr=True, highlight=False, soft_wrap=True),
    )
    return globals()[name]


def notice(text: str) -> None:
    """One plain line on stderr, as `err_console.print` writes a line without markup."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()

EXIT_RUNTIME = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure the user can act on: printed as one line, exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_RUNTIME) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class ConfigError(CliError):
    """Bad configuration (settings file, environment or policy): exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


def fail(message: str, code: int) -> int:
    """Print `message` as the one error line; `code` is the exit status to use."""
    sys.stderr.write(f"parkgate: error: {one_line(message)}\n")
    sys.stderr.flush()
    return code


def failed(exc: BaseException) -> int:
    """The exit status for a command that raised `exc` (not a click usage error),
    its line printed: a CliError's own, invalid settings 2, Ctrl-C 130, anything
    else 1 (re-raised with PARKGATE_DEBUG set: call it in the `except` block)."""
    if isinstance(exc, CliError):
        return fail(exc.message, exc.code)
    if isinstance(exc, ValidationError):
        return fail(f"invalid configuration: {describe_validation_error(exc)}", EXIT_USAGE)
    if isinstance(exc, KeyboardInterrupt):
        sys.stderr.write("aborted\n")
        return 130
    if os.environ.get("PARKGATE_DEBUG"):
        raise exc
    return fail(f"{type(exc).__name__}: {exc}", EXIT_RUNTIME)


def one_line(text: str) -> str:
    """Collapse whitespace so a message always fits one terminal line."""
    return " ".join(str(text).split())


def plural(count: int, word: str, many: str | None = None) -> str:
    """'1 call', '2 calls' (or `many` for an irregular plural)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem of a pydantic error as `field: message` (+ how many more)."""
    errors = exc.errors()
    if not errors:
        return one_line(str(exc))
    first = errors[0]
    loc = ".".join(str(part) for part in first.get("loc", ())) or "value"
    msg = first.get("msg", "invalid")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return one_line(f"{loc}: {msg}{more}")


def use_config_file(path: Path | None) -> None:
    """Point Settings at an explicit YAML file (the global `--config` option)."""
    if path is None:
        return
    path = path.expanduser()
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    os.environ["PARKGATE_CONFIG"] = str(path.resolve())
    get_settings.cache_clear()


def config_source() -> str:
    """Where settings come from, for messages: the YAML path or 'environment'."""
    explicit = os.environ.get("PARKGATE_CONFIG")
    if explicit:
        return explicit
    from parkgate.settings.paths import default_data_dir

    candidate = default_data_dir() / "server.yaml"
    return str(candidate) if candidate.exists() else "environment/defaults"


def load_settings() -> Settings:
    """Build Settings; any problem becomes a one-line ConfigError (exit 2)."""
    explicit = os.environ.get("PARKGATE_CONFIG")
    if explicit and not Path(explicit).expanduser().is_file():
        raise ConfigError(f"config file not found: {explicit}")
    try:
        return get_settings()
    except ValidationError as exc:
        raise ConfigError(
            f"invalid configuration ({config_source()}): {describe_validation_error(exc)}"
        ) from exc
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"invalid configuration ({config_source()}): {one_line(str(exc))}"
        ) from exc
    except Exception as exc:
        # Only a settings file is parsed as YAML: without one, YAML is not imported.
        yaml = sys.modules.get("yaml")
        if yaml is None or not isinstance(exc, yaml.YAMLError):
            raise
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise ConfigError(
            f"invalid YAML in {config_source()}{where}: {one_line(str(problem))}"
        ) from exc


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion for a synchronous CLI command."""
    return asyncio.run(coro)


def no_stack_reason(settings: Settings) -> str | None:
    """Why no parkgate stack is in the configured data directory (no directory, or
    no history database in it), else None. Only for the SQLite default: with a
    database URL the data directory holds no history. Said before connecting,
    so a mistyped PARKGATE_DATA_DIR is not met with `db upgrade` advice (which
    would create a fresh database in the wrong place)."""
    if settings.database_url:
        return None
    data_dir = Path(settings.data_dir).expanduser()
    if (data_dir / "parkgate.db").is_file():
        return None
    what = "does not exist" if not data_dir.exists() else "holds no parkgate.db"
    return (f"no parkgate stack found in {data_dir} (PARKGATE_DATA_DIR): it {what}; "
            "point PARKGATE_DATA_DIR at the data directory `parkgate serve` uses, "
            "or start a stack there with `parkgate serve`")


@asynccontextmanager
async def open_repository(settings: Settings) -> AsyncIterator[Repository]:
    """The history store for a CLI command; an unreachable or unmigrated database
    becomes one line (exit 1)."""
    from parkgate.store import Repository
    from parkgate.store.errors import SchemaError
    from parkgate.store.urls import display_url

    url = settings.effective_database_url
    missing = no_stack_reason(settings)
    if missing is not None:
        raise CliError(missing)
    try:
        repo = await Repository.connect(url, check_schema=True)
    except SchemaError as exc:
        raise CliError(f"{one_line(str(exc))}") from exc
    except (OSError, ValueError) as exc:
        where = display_url(url)
        raise CliError(f"cannot open the database {where}: {one_line(str(exc))}") from exc
    try:
        yield repo
    finally:
        await repo.close()


def in_repository(action: Callable[[Repository], Awaitable[T]],
                  settings: Settings | None = None) -> T:
    """A command's one piece of store work: `action` run on the history store
    opened as `open_repository` opens it (with `settings`, else the loaded ones)."""

    async def work() -> T:
        async with open_repository(settings or load_settings()) as repo:
            return await action(repo)

    return run(work())


def call_statuses(values: list[str] | None) -> list[CallStatus]:
    """`--status` values as call statuses (any case); BadParameter naming the
    allowed ones otherwise."""
    import typer

    from parkgate.calls.records import CallStatus

    try:
        return [CallStatus(v.lower()) for v in values or []]
    except ValueError:
        allowed = ", ".join(s.value for s in CallStatus)
        raise typer.BadParameter(
            f"status must be one of: {allowed}", param_hint="--status"
        ) from None
