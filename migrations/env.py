"""Alembic environment for parkgate's history store.

The URL comes from (first match): a connection handed over in
`config.attributes["connection"]` (what `parkgate.store.migrate` does), a
`config.attributes["url"]`, `sqlalchemy.url` in the ini file, or the parkgate
settings (`PARKGATE_DATABASE_URL`, default SQLite under the data directory).
Migrations run on the async drivers (asyncpg / aiosqlite) via `run_sync`.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from parkgate.store.models import Base

config = context.config
if config.config_file_name and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from parkgate.settings import get_settings

        url = get_settings().effective_database_url
    return str(url)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    from parkgate.store.engine import WRITE, make_engine

    engine = make_engine(_url())
    try:
        async with engine.connect() as conn:
            await conn.execution_options(**{WRITE: True})
            async with conn.begin():
                await conn.run_sync(_run)
    finally:
        await engine.dispose()


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
    else:
        asyncio.run(_run_async())


if context.is_offline_mode():
    run_offline()
else:
    run_online()
