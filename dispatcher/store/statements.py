"""The write path's statements, built once per dialect and executed with parameters.

`Repository.apply` runs for every step of every call. Building its statements
anew each time (literal values coerced into bind parameters, `ON CONFLICT`
clauses, cache keys) cost more CPU than executing them; built once with bind
parameters, each execution only binds values, and SQLAlchemy's compiled cache
does the rest.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import Table, bindparam, case, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite

from parkgate.calls.records import CallStatus
from parkgate.store.models import Base

CALLS: Table = Base.metadata.tables["tool_calls"]
EVENTS: Table = Base.metadata.tables["tool_events"]
CHAINS: Table = Base.metadata.tables["tool_event_chains"]
APPROVALS: Table = Base.metadata.tables["approvals"]
BLOBS: Table = Base.metadata.tables["blobs"]
BLOB_REFS: Table = Base.metadata.tables["blob_refs"]
CONFLICTS: Table = Base.metadata.tables["event_conflicts"]
SESSIONS: Table = Base.metadata.tables["sessions"]
API_KEYS: Table = Base.metadata.tables["api_keys"]
SUBMISSIONS: Table = Base.metadata.tables["call_submissions"]

#: What an event says (its meaning), compared when an id is written again.
#: `at` is not part of it: a retried write of the same step may carry a later
#: clock; `data.duration_ms` neither (see MEANING_VOLATILE_DATA).
MEANING_COLUMNS = (
    "type",
    "session_id",
    "turn_id",
    "tool_use_id",
    "tool_name",
    "side_effects",
    "request_id",
    "error_class",
    "message",
    "parent_tool_use_id",
    "data",
)
MEANING_VOLATILE_DATA = frozenset({"duration_ms"})
TERMINAL = [s.value for s in CallStatus if s.terminal]


def insert(dialect: str, table: Table) -> Any:
    """INSERT with the dialect's ON CONFLICT support."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(table)


#: Event ids already stored, of those in `ids` (expanding IN), with their meaning.
STORED_EVENT_IDS = select(
    EVENTS.c.event_id, *(EVENTS.c[name] for name in MEANING_COLUMNS)
).where(EVENTS.c.event_id.in_(bindparam("ids", expanding=True)))

#: Heads of the chains in `keys`, a list of (session_id, chain_id).
CHAIN_HEADS = (
    select(CHAINS.c.session_id, CHAINS.c.chain_id, CHAINS.c.length, CHAINS.c.head_hash)
    .where(tuple_(CHAINS.c.session_id, CHAINS.c.chain_id).in_(bindparam("keys", expanding=True)))
    .with_for_update()
)

#: PostgreSQL: the transaction-scoped lock serializing one session's appends.
SESSION_LOCK = select(func.pg_advisory_xact_lock(bindparam("key")))


@lru_cache(maxsize=4)
def insert_events(dialect: str) -> Any:
    """Insert event rows, skipping ids already stored."""
    return insert(dialect, EVENTS).on_conflict_do_nothing(index_elements=["event_id"])


@lru_cache(maxsize=4)
def upsert_chain_heads(dialect: str) -> Any:
    """Insert or move the heads of chains."""
    stmt = insert(dialect, CHAINS)
    return stmt.on_conflict_do_update(
        index_elements=["session_id", "chain_id"],
        set_={
            "length": stmt.excluded.length,
            "head_hash": stmt.excluded.head_hash,
            "updated_at": stmt.excluded.updated_at,
        },
    )


@lru_cache(maxsize=256)
def upsert_call(dialect: str, columns: frozenset[str], guard_status: bool) -> Any:
    """Insert a call row, or refresh the given columns of the existing one.

    `columns` are the columns the update sets (besides the key and
    `updated_at`); executed with a value for each of them and for the
    insert-only ones (session_id, tool_use_id, status, created_at). With
    `guard_status`, a non-terminal status never replaces a terminal one: a
    late or retried write from a lost worker must not resurrect a finished call.
    """
    stmt = insert(dialect, CALLS)
    refresh: dict[str, Any] = {name: stmt.excluded[name] for name in columns}
    refresh["updated_at"] = stmt.excluded.updated_at
    if guard_status and "status" in columns:
        refresh["status"] = case(
            (CALLS.c.status.in_(TERMINAL), CALLS.c.status), else_=stmt.excluded.status
        )
    return stmt.on_conflict_do_update(index_elements=["session_id", "tool_use_id"], set_=refresh)


@lru_cache(maxsize=16)
def upsert_approval(dialect: str, columns: frozenset[str]) -> Any:
    """Insert an approval request, or refresh its columns (never its decision:
    decisions go through a first-write-wins update)."""
    stmt = insert(dialect, APPROVALS)
    refresh = {name: stmt.excluded[name] for name in columns if name != "request_id"}
    return stmt.on_conflict_do_update(index_elements=["request_id"], set_=refresh)
