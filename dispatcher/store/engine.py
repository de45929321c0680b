"""Async engine construction with the per-backend settings parkgate relies on.

SQLite: WAL (readers never block the writer), a busy timeout, and explicit
transactions: writers start with BEGIN IMMEDIATE so two writers never both
read a chain head and then collide; readers use a plain BEGIN.
PostgreSQL: asyncpg with pool pre-ping.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import StaticPool

from parkgate.store.urls import async_url, ensure_sqlite_dir

#: Execution option asking for a write transaction (BEGIN IMMEDIATE on SQLite).
WRITE = "parkgate_write"


def make_engine(url: str | URL, **kwargs: Any) -> AsyncEngine:
    """An AsyncEngine for a PostgreSQL or SQLite URL (plain schemes accepted)."""
    parsed = async_url(url)
    if parsed.get_backend_name() == "sqlite":
        ensure_sqlite_dir(parsed)
        memory = not parsed.database or parsed.database == ":memory:"
        if memory:
            kwargs.setdefault("poolclass", StaticPool)
        engine = create_async_engine(parsed, pool_pre_ping=True, **kwargs)
        _configure_sqlite(engine.sync_engine, wal=not memory)
        return engine
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    return create_async_engine(parsed, pool_pre_ping=True, **kwargs)


def sqlite_sync_twin(engine: AsyncEngine) -> Engine | None:
    """A plain (pysqlite) engine on the same SQLite file as `engine`, or None.

    The repository runs whole write transactions on it in a worker thread
    (see Repository._in_write); in-memory databases have no twin.
    """
    url = engine.url
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    twin = create_engine(
        url.set(drivername="sqlite"),
        pool_pre_ping=True,
        connect_args={"check_same_thread": False},
    )
    _configure_sqlite(twin, wal=True)
    return twin


_WRITER_LOCKS: dict[str, threading.Lock] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


def sqlite_writer_lock(engine: Engine) -> threading.Lock:
    """One lock per SQLite file in this process, shared by every engine on it.

    Other processes on the same file still wait in SQLite's busy handler.
    """
    key = str(engine.url.database)
    with _WRITER_LOCKS_GUARD:
        return _WRITER_LOCKS.setdefault(key, threading.Lock())


def _configure_sqlite(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's implicit transactions defer locking).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = bool(conn.get_execution_options().get(WRITE))
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
