"""`is_unreachable` tells a database that did not answer from a wrong statement:
callers that must outlast an outage (classify) retry the first without a cap."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from parkgate.runtime.ports import free_port
from parkgate.store.engine import make_engine
from parkgate.store.errors import is_unreachable
from tests.fixtures.db import PG_ADMIN_URL


async def _error(url: str, statement: str = "SELECT 1") -> BaseException:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    except Exception as exc:
        return exc
    finally:
        await engine.dispose()
    raise AssertionError(f"{statement!r} did not fail")


async def test_no_server_and_a_terminated_connection_are_unreachable(pg_url: str) -> None:
    down = make_url(pg_url).set(host="127.0.0.1", port=free_port())
    assert is_unreachable(await _error(down.render_as_string(hide_password=False)))
    # The server ends the session under us (as a shutdown does): 57P01.
    terminated = await _error(pg_url, "SELECT pg_terminate_backend(pg_backend_pid())")
    assert is_unreachable(terminated), repr(terminated)


@pytest.mark.parametrize("statement", ["SELECT * FROM no_such_table", "SELEC 1",
                                       "SELECT 1/0"])
async def test_a_wrong_statement_is_not(pg_url: str, statement: str) -> None:
    exc = await _error(pg_url, statement)
    assert not is_unreachable(exc), repr(exc)


async def test_sqlite_tells_a_file_it_cannot_open_from_a_missing_table(tmp_path: Path) -> None:
    assert is_unreachable(await _error(f"sqlite+aiosqlite:///{tmp_path}"))  # a directory
    missing = await _error(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}", "SELECT * FROM nope")
    assert not is_unreachable(missing), repr(missing)


@contextlib.asynccontextmanager
async def no_connections_role() -> AsyncIterator[str]:
    """A login role PostgreSQL refuses every connection to (CONNECTION LIMIT 0):
    'too many connections', as a server at max_connections answers."""
    role = f"parkgate_full_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(PG_ADMIN_URL.replace("+asyncpg", ""), timeout=10)
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0')
        try:
            yield role
        finally:
            await admin.execute(f'DROP ROLE "{role}"')
    finally:
        await admin.close()


async def test_a_server_that_takes_no_more_connections_is_unreachable(pg_url: str) -> None:
    """53300 (and a restart's 57P03) reach SQLAlchemy as a plain DBAPIError,
    neither an OperationalError nor an invalidated connection: told apart by
    SQLSTATE, or classify would deny a call after five attempts."""
    async with no_connections_role() as role:
        full = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
        exc = await _error(full)
    assert getattr(getattr(exc, "orig", None), "sqlstate", None) == "53300", repr(exc)
    assert is_unreachable(exc), repr(exc)
