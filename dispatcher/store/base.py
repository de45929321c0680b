"""What every part of the Repository shares: the engine and its transactions.

Each aggregate (store/event_store.py, call_store.py, approval_store.py,
session_store.py, audit_store.py, blob_store.py) is a mixin over this base;
`Repository` (store/repository.py) is composed from them.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from enum import Enum
from typing import Any, TypeVar

from sqlalchemy import Executable, Table, select
from sqlalchemy.engine import Connection, Engine, Row, RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parkgate.store import statements
from parkgate.store.canonical import clean_text
from parkgate.store.engine import WRITE, sqlite_sync_twin, sqlite_writer_lock
from parkgate.store.migrate import check_schema_on
from parkgate.store.wakeups import FinalRowWaiters

#: Rows per statement or transaction for bulk reads, writes and deletes.
BATCH = 500
T = TypeVar("T")


def enum_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def fit(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """Strings as the column types will store them (NUL replaced, clipped to the
    column length): what is hashed must be exactly what is stored."""
    out = dict(values)
    for name, value in values.items():
        if isinstance(value, str) and name in table.c:
            value = clean_text(value)
            length = getattr(table.c[name].type, "length", None)
            if length is not None and len(value) > length:
                value = value[:length]
            out[name] = value
    return out


def _lock_key(session_id: str) -> int:
    digest = hashlib.sha256(b"parkgate.session:" + session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class StoreBase:
    """One async engine (and, for file SQLite, its plain twin for writes)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        #: File SQLite only: the same database through plain pysqlite, for writes.
        self._sync_engine: Engine | None = sqlite_sync_twin(engine)
        #: Long-polls of this process waiting for a call's final row (store/wakeups.py).
        self.final_rows = FinalRowWaiters()

    async def close(self) -> None:
        if self._sync_engine is not None:
            self._sync_engine.dispose()
        await self.engine.dispose()

    async def check_schema(self) -> str:
        """The revision, or a SchemaError naming what to do (see migrate.check_schema_on)."""
        return await check_schema_on(self.engine)

    async def ping(self) -> None:
        """Raise when the database is unreachable (for /readyz)."""
        async with self._read() as conn:
            await conn.execute(select(1))

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            await conn.execution_options(**{WRITE: True})
            async with conn.begin():
                yield conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn, conn.begin():
            yield conn

    async def _first(self, query: Executable) -> RowMapping | None:
        """The first row of a one-statement read, as a mapping.

        A file SQLite database answers it in one hop to a worker thread on the
        plain pysqlite twin (WAL: readers never wait for the writer), instead
        of the several hops aiosqlite makes per statement; the hot reads of a
        request (its key, session, approval, call row) each cost one hop.
        """
        row = await self._first_row(query)
        return row._mapping if row is not None else None

    async def _first_row(self, query: Executable) -> Row[Any] | None:
        if self._sync_engine is not None:
            return await asyncio.to_thread(self._sync_first, query)
        async with self._read() as conn:
            return (await conn.execute(query)).first()

    def _sync_first(self, query: Executable) -> Row[Any] | None:
        assert self._sync_engine is not None
        with self._sync_engine.connect() as conn, conn.begin():
            return conn.execute(query).first()

    def _lock_sessions(self, conn: Connection, session_ids: Iterable[str]) -> None:
        if self.dialect != "postgresql":
            return  # SQLite: BEGIN IMMEDIATE already serializes writers
        for sid in sorted(set(session_ids)):
            conn.execute(statements.SESSION_LOCK, {"key": _lock_key(sid)})

    async def _in_write(self, work: Callable[..., T], *args: Any) -> T:
        """Run `work(conn, *args)` (plain, blocking SQLAlchemy) in one write transaction.

        A file SQLite database runs the whole transaction in a worker thread
        on a plain pysqlite engine: one hop to a thread per transaction
        instead of one per statement (aiosqlite), which is most of the CPU a
        small write costs. Everything else runs it through the async engine.
        """
        if self._sync_engine is not None:
            return await asyncio.to_thread(self._in_sync_write, work, *args)
        async with self._write() as conn:
            return await conn.run_sync(work, *args)

    def _in_sync_write(self, work: Callable[..., T], *args: Any) -> T:
        assert self._sync_engine is not None
        # Writers of this process queue on a lock rather than on SQLite's busy
        # handler, which polls with sleeps of up to 100 ms: under 32 concurrent
        # calls that made a 1 ms write take 190 ms at p99.
        with sqlite_writer_lock(self._sync_engine), self._sync_engine.connect() as conn:
            conn = conn.execution_options(**{WRITE: True})
            with conn.begin():
                return work(conn, *args)
