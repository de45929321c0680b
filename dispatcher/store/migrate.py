"""Alembic from Python: upgrade, downgrade, current revision, schema check.

The CLI (`parkgate db upgrade`) and `parkgate serve` call these; the Alembic
scripts live in the top-level `migrations` package and `migrations/env.py`
uses the connection handed over here (or the settings' URL when Alembic is run
from its own command line with `-c migrations/alembic.ini`).

Alembic itself (~11 MB of imports) is imported by the functions that need it:
the start-up schema check of the API and of every worker reads the stamped
revision plainly first (parkgate.store.schema_check) and loads Alembic only
to explain a mismatch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import inspect
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parkgate.store.engine import WRITE, make_engine
from parkgate.store.errors import SchemaNotMigratedError, SchemaTooNewError, unavailable
from parkgate.store.schema_check import migrations_dir, script_head, stamped_revisions
from parkgate.store.urls import async_url, display_url

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

T = TypeVar("T")


def alembic_config(url: str | URL | None = None) -> Config:
    """A programmatic Alembic config (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        cfg.attributes["url"] = async_url(url).render_as_string(hide_password=False)
    return cfg


def script_directory() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this code knows."""
    head = script_directory().get_current_head()
    if head is None:  # pragma: no cover - the chain always has a head
        raise RuntimeError("no Alembic revisions found")
    return head


def _current(conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(conn).get_current_revision()


@asynccontextmanager
async def _connect(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """engine.connect(), with a failure to connect turned into one clear line."""
    conn = engine.connect()
    try:
        await conn.start()
    except (OSError, DBAPIError) as exc:
        raise unavailable(display_url(engine.url), exc) from exc
    try:
        yield conn
    finally:
        await conn.close()


async def _with_connection(
    url: str | URL, fn: Callable[[Connection], T], *, write: bool = True
) -> T:
    engine = make_engine(url)
    try:
        async with _connect(engine) as conn:
            if write:
                await conn.execution_options(**{WRITE: True})
            async with conn.begin():
                return await conn.run_sync(fn)
    finally:
        await engine.dispose()


async def upgrade_async(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision`."""

    def run(conn: Connection) -> None:
        from alembic import command

        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)

    await _with_connection(url, run)


async def downgrade_async(url: str | URL, revision: str) -> None:
    """Migrate the database at `url` down to `revision` ("base" drops everything)."""

    def run(conn: Connection) -> None:
        from alembic import command

        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)

    await _with_connection(url, run)


async def current_async(url: str | URL) -> str | None:
    """The database's revision (None when it was never migrated)."""
    return await _with_connection(url, _current, write=False)


def _run_blocking(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine from sync code, even when this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Blocking `upgrade_async`."""
    _run_blocking(lambda: upgrade_async(url, revision))


def downgrade(url: str | URL, revision: str) -> None:
    """Blocking `downgrade_async`."""
    _run_blocking(lambda: downgrade_async(url, revision))


def current(url: str | URL) -> str | None:
    """Blocking `current_async`."""
    return _run_blocking(lambda: current_async(url))


async def check_schema_on(engine: AsyncEngine) -> str:
    """Raise a one-line SchemaError unless the database is exactly at head.

    Returns the revision. Not migrated (or behind) -> SchemaNotMigratedError;
    a revision this code does not know -> SchemaTooNewError. At head (the
    usual case) Alembic is not imported: see parkgate.store.schema_check.
    """
    plain_head = script_head()
    if plain_head is not None:
        async with _connect(engine) as conn:
            stamped = await conn.run_sync(stamped_revisions)
        if stamped == [plain_head]:
            return plain_head
    async with _connect(engine) as conn:
        has_version = await conn.run_sync(lambda c: inspect(c).has_table("alembic_version"))
        rev = await conn.run_sync(_current) if has_version else None
    where = display_url(engine.url)
    head = head_revision()
    if rev == head:
        return rev
    if rev is None:
        raise SchemaNotMigratedError(f"database {where} is not migrated; run `parkgate db upgrade`")
    scripts = script_directory()
    try:
        known = scripts.get_revision(rev)
    except Exception:
        known = None
    if known is None:
        raise SchemaTooNewError(
            f"database {where} is at revision {rev}, which this parkgate does not know"
            f" (code head {head}); it was migrated by a newer version — upgrade parkgate"
        )
    raise SchemaNotMigratedError(
        f"database {where} is at revision {rev}, behind the code (head {head});"
        " run `parkgate db upgrade`"
    )
