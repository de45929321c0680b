"""`parkgate db upgrade|current|downgrade`: the history store's Alembic migrations.

The URL comes from the settings (PARKGATE_DATABASE_URL, the YAML file, or
SQLite under the data directory) unless `--url` is given.
"""

from __future__ import annotations

import typer

from parkgate.cli.common import CliError, console, load_settings, run

app = typer.Typer(help="Database migrations of the history store.", no_args_is_help=True)

_URL = typer.Option(
    None, "--url", help="Database URL (default: the configured one).", show_default=False
)


def _url(url: str | None) -> str:
    from parkgate.store.urls import async_url

    raw = url or load_settings().effective_database_url
    try:
        async_url(raw)
    except Exception as exc:
        raise typer.BadParameter(str(exc), param_hint="--url") from None
    return raw


def _store_errors(exc: Exception) -> CliError:
    return CliError(" ".join(str(exc).split()))


@app.command("upgrade")
def upgrade(
    url: str | None = _URL,
    revision: str = typer.Option("head", "--revision", "-r", help="Target revision."),
) -> None:
    """Create or migrate the tables (idempotent)."""
    from parkgate.store import StoreError
    from parkgate.store.migrate import current_async, upgrade_async
    from parkgate.store.urls import display_url

    target = _url(url)
    try:
        run(upgrade_async(target, revision))
        now = run(current_async(target))
    except StoreError as exc:
        raise _store_errors(exc) from exc
    console.print(f"database {display_url(target)} is at revision {now}", soft_wrap=True)


@app.command("current")
def current(url: str | None = _URL) -> None:
    """Show the database's revision and whether it matches this parkgate."""
    from parkgate.store import StoreError
    from parkgate.store.migrate import current_async, head_revision
    from parkgate.store.urls import display_url

    target = _url(url)
    try:
        rev = run(current_async(target))
    except StoreError as exc:
        raise _store_errors(exc) from exc
    head = head_revision()
    if rev == head:
        state = "up to date"
    elif rev is None:
        state = "not migrated; run `parkgate db upgrade`"
    else:
        state = f"differs from the code's head {head}"
    console.print(
        f"database {display_url(target)}: revision {rev or '-'} ({state})", soft_wrap=True
    )


@app.command("downgrade")
def downgrade(
    revision: str = typer.Argument(..., help='Target revision ("base" drops every table).'),
    url: str | None = _URL,
    yes: bool = typer.Option(False, "--yes", help="Do it (downgrading deletes history)."),
) -> None:
    """Migrate down (destroys the data of the removed tables)."""
    from parkgate.store import StoreError
    from parkgate.store.migrate import current_async, downgrade_async
    from parkgate.store.urls import display_url

    target = _url(url)
    if not yes:
        raise typer.BadParameter("downgrading deletes history; pass --yes to confirm")
    try:
        run(downgrade_async(target, revision))
        now = run(current_async(target))
    except StoreError as exc:
        raise _store_errors(exc) from exc
    console.print(f"database {display_url(target)} is at revision {now or 'base'}", soft_wrap=True)
