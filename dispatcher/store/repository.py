"""The history store: one async SQLAlchemy repository for PostgreSQL and SQLite.

Writes (`apply`, `save_approval`, `decide_approval`, ...) are idempotent and
safe under concurrent callers. Event appends for one session are serialized
(PostgreSQL: a transaction-scoped advisory lock per session; SQLite: BEGIN
IMMEDIATE), which keeps each call's hash chain linear and makes `seq` commit
in order within a session, so an SSE reader resuming after `seq` N never
misses an event that commits later with a smaller number.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from enum import Enum
from typing import IO, Any, Literal, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.engine import URL, Connection, Engine, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from parkgate.access import DEFAULT_PROJECT, PROJECT_PATTERN, Submitter, normalize_roles
from parkgate.events import ToolEvent, make_event_id
from parkgate.models import utcnow
from parkgate.records import (
    ApprovalRecord,
    CallStatus,
    CallUpdate,
    HistoryStore,
    RecordedFinish,
)
from parkgate.store import audit_export, semantics, statements
from parkgate.store.canonical import clean_text, event_hash, normalize_json, redact
from parkgate.store.chain import GENESIS, check_chain
from parkgate.store.engine import WRITE, make_engine, sqlite_sync_twin, sqlite_writer_lock
from parkgate.store.errors import (
    ApiKeyNameTakenError,
    ApiKeyNotFoundError,
    ApprovalNotFoundError,
    InvalidCursorError,
    SessionConflictError,
)
from parkgate.store.migrate import check_schema_on
from parkgate.store.models import Base
from parkgate.store.remembered import RememberedRulesStore
from parkgate.store.results import (
    ApiKeyRecord,
    CallFilters,
    CallRecord,
    EventRecord,
    MeaningReport,
    Page,
    SessionRecord,
    TimelineEntry,
    VerifyReport,
)
from parkgate.store.statements import (
    APPROVALS,
    BLOB_REFS,
    BLOBS,
    CALLS,
    CHAINS,
    CONFLICTS,
    EVENTS,
    TERMINAL,
)
from parkgate.store.types import as_utc

SESSIONS: Table = Base.metadata.tables["sessions"]
#: A call's final events: exactly one of them may be stored.
_FINAL_TYPES = ("tool.completed", "tool.failed")
log = logging.getLogger(__name__)
API_KEYS: Table = Base.metadata.tables["api_keys"]
SUBMISSIONS: Table = Base.metadata.tables["call_submissions"]

API_KEY_PREFIX = "pgk_"
_LAST_USED_GRANULARITY = timedelta(seconds=60)
_BATCH = 500
T = TypeVar("T")

ExportFormat = Literal["jsonl", "csv"]


def _chain_id(event: ToolEvent) -> str:
    """Sub-call events join the chain of the call that composed them."""
    return event.parent_tool_use_id or event.tool_use_id


def _enum_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _fit(table: Table, values: dict[str, Any]) -> dict[str, Any]:
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


def _meaning(fields: Any) -> dict[str, Any]:
    """What an event says, for comparing two writes of one event id."""
    out = {name: fields[name] for name in statements.MEANING_COLUMNS}
    data = out.get("data") or {}
    out["data"] = {
        k: v for k, v in data.items() if k not in statements.MEANING_VOLATILE_DATA
    }
    return out


def _conflict_row(
    event_id: str, stored: dict[str, Any], attempted: dict[str, Any]
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "session_id": stored["session_id"],
        "tool_use_id": stored["tool_use_id"],
        "type": stored["type"],
        "stored": normalize_json(stored),
        "attempted": normalize_json(attempted),
        "detected_at": utcnow(),
    }


def _brief(meaning: dict[str, Any]) -> str:
    """The part of an event's meaning a conflict is usually about."""
    data = meaning.get("data") or {}
    keys = ("decision", "decided_by", "via")
    parts = [f"{k}={data[k]}" for k in keys if k in data]
    if meaning.get("error_class"):
        parts.append(f"error_class={meaning['error_class']}")
    return ", ".join(parts) or json.dumps(data, sort_keys=True, default=str)[:200]


def _lock_key(session_id: str) -> int:
    digest = hashlib.sha256(b"parkgate.session:" + session_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


class WaitingApproval(NamedTuple):
    """One row of `Repository.waiting_approvals`."""

    approval: ApprovalRecord
    project: str
    #: None for a composed tool's sub-call (it has no row of its own).
    status: CallStatus | None
    #: The key that submitted the call (None for a sub-call: ask for its parent's).
    submitter: Submitter | None


class Repository(RememberedRulesStore):
    """History, approvals, sessions and API keys over one async engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        #: File SQLite only: the same database through plain pysqlite, for writes.
        self._sync_engine: Engine | None = sqlite_sync_twin(engine)

    # ------------------------------------------------------------------ setup
    @classmethod
    async def connect(
        cls, url: str | URL, *, check_schema: bool = False, **engine_kwargs: Any
    ) -> Repository:
        """Open a repository; plain `postgresql://` / `sqlite:///` URLs are accepted.

        With `check_schema=True` a database that is not at the code's migration
        head raises SchemaError (one line) and the engine is disposed.
        """
        repo = cls(make_engine(url, **engine_kwargs))
        if check_schema:
            try:
                await repo.check_schema()
            except BaseException:
                await repo.close()
                raise
        return repo

    async def close(self) -> None:
        if self._sync_engine is not None:
            self._sync_engine.dispose()
        await self.engine.dispose()

    async def __aenter__(self) -> Repository:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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

    # ------------------------------------------------------------------ writes
    async def apply(self, events: Sequence[ToolEvent], update: CallUpdate | None = None) -> None:
        """Append the events not stored yet and upsert the call row, in ONE transaction.

        Idempotent: events are keyed by event_id, the call by (session_id,
        tool_use_id); None fields of `update` leave the row unchanged.
        (HistoryStore.apply; `record` is the same and says how many were new.)
        """
        await self.record(events, update)

    async def record(self, events: Sequence[ToolEvent], update: CallUpdate | None = None) -> int:
        """`apply`, returning how many events were newly stored."""
        if not events and update is None:
            return 0
        return await self._in_write(self._record_in, events, update)

    async def record_unless_finished(
        self, events: Sequence[ToolEvent], update: CallUpdate
    ) -> RecordedFinish | None:
        """`apply`, unless the call already has its final event (tool.completed or
        tool.failed): then its other events are still written, the final event
        and the row update are not, and the stored final state is returned.

        For an outcome the workflow could not observe (a lost execute activity
        that may have finished and recorded before it died): the store must not
        say both "completed" and "failed".
        """
        return await self._in_write(self._record_unless_finished_in, events, update)

    def _record_unless_finished_in(
        self, conn: Connection, events: Sequence[ToolEvent], update: CallUpdate
    ) -> RecordedFinish | None:
        self._lock_sessions(conn, {update.session_id, *(e.session_id for e in events)})
        finals = {
            make_event_id(update.session_id, update.tool_use_id, kind): kind
            for kind in _FINAL_TYPES
        }
        stored = set(conn.execute(statements.STORED_EVENT_IDS, {"ids": list(finals)}).scalars())
        if not stored:
            if events:
                self._append(conn, events)
            self._upsert_call(conn, update)
            return None
        keep = [e for e in events if e.event_id not in finals]
        if keep:
            self._append(conn, keep)
        row = conn.execute(
            select(CALLS.c.status, CALLS.c.error_class, CALLS.c.result, CALLS.c.duration_ms)
            .where(CALLS.c.session_id == update.session_id,
                   CALLS.c.tool_use_id == update.tool_use_id)
        ).mappings().first()
        if row is None or row["result"] is None:
            return None
        return RecordedFinish.model_validate(dict(row))

    def _record_in(
        self, conn: Connection, events: Sequence[ToolEvent], update: CallUpdate | None
    ) -> int:
        sessions = {e.session_id for e in events}
        if update is not None:
            sessions.add(update.session_id)
        self._lock_sessions(conn, sessions)
        added = self._append(conn, events) if events else 0
        if update is not None:
            self._upsert_call(conn, update)
        return added

    @staticmethod
    def _event_fields(ev: ToolEvent) -> dict[str, Any]:
        """The stored (hashed) fields of an event, minus its place in the chain."""
        return _fit(
            EVENTS,
            {
                "event_id": ev.event_id,
                "chain_id": _chain_id(ev),
                "type": ev.type,
                "session_id": ev.session_id,
                "turn_id": ev.turn_id,
                "tool_use_id": ev.tool_use_id,
                "tool_name": ev.tool_name,
                "side_effects": _enum_value(ev.side_effects),
                "at": as_utc(ev.at),
                "request_id": ev.request_id,
                "error_class": _enum_value(ev.error_class),
                "message": ev.message,
                "parent_tool_use_id": ev.parent_tool_use_id,
                "data": normalize_json(redact(ev.data)),
            },
        )

    def _append(self, conn: Connection, events: Sequence[ToolEvent]) -> int:
        unique: dict[str, dict[str, Any]] = {}
        for ev in events:
            fields = self._event_fields(ev)
            unique.setdefault(fields["event_id"], fields)
        ids = list(unique)
        stored: set[str] = set()
        conflicts: list[dict[str, Any]] = []
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            found = conn.execute(statements.STORED_EVENT_IDS, {"ids": chunk}).mappings()
            for have in found:
                stored.add(have["event_id"])
                was, now_ = _meaning(have), _meaning(unique[have["event_id"]])
                if was != now_:
                    conflicts.append(_conflict_row(have["event_id"], was, now_))
        if conflicts:
            self._record_conflicts(conn, conflicts)
        new = [fields for eid, fields in unique.items() if eid not in stored]
        if not new:
            return 0

        keys = sorted({(f["session_id"], f["chain_id"]) for f in new})
        heads: dict[tuple[str, str], tuple[int, str]] = {}
        head_rows = conn.execute(statements.CHAIN_HEADS, {"keys": keys})
        for row in head_rows:
            heads[(row.session_id, row.chain_id)] = (row.length, row.head_hash)

        now = utcnow()
        rows_out: list[dict[str, Any]] = []
        for fields in new:
            key = (fields["session_id"], fields["chain_id"])
            length, prev = heads.get(key, (0, GENESIS))
            fields = {**fields, "chain_index": length}
            digest = event_hash(prev, fields)
            rows_out.append({**fields, "prev_hash": prev, "hash": digest, "recorded_at": now})
            heads[key] = (length + 1, digest)

        conn.execute(statements.insert_events(self.dialect), rows_out)
        touched = {(r["session_id"], r["chain_id"]) for r in rows_out}
        head_values = [
            {
                "session_id": s,
                "chain_id": c,
                "length": heads[(s, c)][0],
                "head_hash": heads[(s, c)][1],
                "updated_at": now,
            }
            for s, c in sorted(touched)
        ]
        conn.execute(statements.upsert_chain_heads(self.dialect), head_values)
        return len(rows_out)

    @staticmethod
    def _record_conflicts(conn: Connection, conflicts: list[dict[str, Any]]) -> None:
        """Keep, log and count (metrics read the table) writes that contradict
        a stored event: the stored event stays, nothing is silently dropped."""
        for c in conflicts:
            log.error(
                "store integrity error: event %s (%s of %s/%s) was written again with "
                "different content; stored %s, attempted %s",
                c["event_id"], c["type"], c["session_id"], c["tool_use_id"],
                json.dumps(c["stored"], sort_keys=True, default=str),
                json.dumps(c["attempted"], sort_keys=True, default=str),
            )
        conn.execute(CONFLICTS.insert(), conflicts)

    async def event_conflicts(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Recorded integrity errors (all, or one session's), oldest first."""
        stmt = select(CONFLICTS).order_by(CONFLICTS.c.id)
        if session_id is not None:
            stmt = stmt.where(CONFLICTS.c.session_id == session_id)
        async with self._read() as conn:
            return [dict(r) for r in (await conn.execute(stmt)).mappings()]

    @staticmethod
    def _call_values(update: CallUpdate) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in CallUpdate.model_fields:
            if name in ("session_id", "tool_use_id"):
                continue
            value = getattr(update, name)
            if value is None:
                continue
            if name == "input":
                value = normalize_json(redact(value))
            elif name == "result":
                value = normalize_json(value.model_dump(mode="json"))
            elif name == "full_output":
                value = normalize_json(value)
            elif isinstance(value, datetime):
                value = as_utc(value)
            elif isinstance(value, str):
                value = clean_text(_enum_value(value))
            values[name] = _enum_value(value)
        return values

    def _upsert_call(self, conn: Connection, update: CallUpdate) -> None:
        values = _fit(CALLS, self._call_values(update))
        now = utcnow()
        params = {
            "session_id": update.session_id,
            "tool_use_id": update.tool_use_id,
            "status": CallStatus.QUEUED.value,
            "created_at": now,
            **values,
            "updated_at": now,
        }
        guard = "status" in values and values["status"] not in TERMINAL
        conn.execute(statements.upsert_call(self.dialect, frozenset(values), guard), params)

    async def update_call(self, update: CallUpdate) -> None:
        """Upsert just the call row (no events)."""
        await self.record([], update)

    # ------------------------------------------------------------------ call reads
    async def get_call(self, session_id: str, tool_use_id: str) -> CallRecord | None:
        async with self._read() as conn:
            row = (
                (
                    await conn.execute(
                        select(CALLS).where(
                            CALLS.c.session_id == session_id, CALLS.c.tool_use_id == tool_use_id
                        )
                    )
                )
                .mappings()
                .first()
            )
        return CallRecord.model_validate(dict(row)) if row else None

    @staticmethod
    def _filter_clauses(filters: CallFilters | None) -> list[ColumnElement[bool]]:
        if filters is None:
            return []
        clauses: list[ColumnElement[bool]] = []
        for name in ("session_id", "turn_id", "tool_name", "side_effects", "decided_by"):
            value = getattr(filters, name)
            if value is not None:
                clauses.append(CALLS.c[name] == _enum_value(value))
        if filters.status is not None:
            statuses = filters.status if isinstance(filters.status, list) else [filters.status]
            clauses.append(CALLS.c.status.in_([_enum_value(s) for s in statuses]))
        if filters.since is not None:
            clauses.append(CALLS.c.created_at >= as_utc(filters.since))
        if filters.until is not None:
            clauses.append(CALLS.c.created_at < as_utc(filters.until))
        if filters.project is not None:
            clauses.append(
                CALLS.c.session_id.in_(
                    select(SESSIONS.c.session_id).where(SESSIONS.c.project == filters.project)
                )
            )
        return clauses

    @staticmethod
    def encode_cursor(created_at: datetime, row_id: int) -> str:
        raw = json.dumps([as_utc(created_at).isoformat(), row_id]).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @staticmethod
    def decode_cursor(cursor: str) -> tuple[datetime, int]:
        try:
            padded = cursor + "=" * (-len(cursor) % 4)
            stamp, row_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
            if not isinstance(row_id, int) or isinstance(row_id, bool):
                raise TypeError("id")
            return as_utc(datetime.fromisoformat(stamp)), row_id
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
            raise InvalidCursorError(f"invalid cursor {cursor[:40]!r}") from exc

    async def list_calls(
        self,
        filters: CallFilters | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        after: str | None = None,
    ) -> Page:
        """Calls newest first (created_at, id), keyset-paginated by an opaque cursor.

        `after` is an alias of `cursor`. Raises InvalidCursorError for a cursor
        this store did not produce.
        """
        cursor = cursor if cursor is not None else after
        limit = max(1, min(int(limit), 1000))
        query: Select[Any] = select(CALLS).where(*self._filter_clauses(filters))
        if cursor:
            stamp, row_id = self.decode_cursor(cursor)
            query = query.where(
                or_(
                    CALLS.c.created_at < stamp,
                    and_(CALLS.c.created_at == stamp, CALLS.c.id < row_id),
                )
            )
        query = query.order_by(CALLS.c.created_at.desc(), CALLS.c.id.desc()).limit(limit + 1)
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        items = [CallRecord.model_validate(dict(r)) for r in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = self.encode_cursor(last.created_at, last.id)
        return Page(items=items, next_cursor=next_cursor)

    async def count_calls(self, filters: CallFilters | None = None) -> int:
        async with self._read() as conn:
            query = select(func.count()).select_from(CALLS).where(*self._filter_clauses(filters))
            return int((await conn.execute(query)).scalar_one())

    async def iter_calls(
        self, filters: CallFilters | None = None, batch: int = _BATCH
    ) -> AsyncIterator[list[CallRecord]]:
        """All matching calls, oldest first, in batches (keyset; no long transaction)."""
        last: tuple[datetime, int] | None = None
        while True:
            query: Select[Any] = select(CALLS).where(*self._filter_clauses(filters))
            if last is not None:
                query = query.where(
                    or_(
                        CALLS.c.created_at > last[0],
                        and_(CALLS.c.created_at == last[0], CALLS.c.id > last[1]),
                    )
                )
            query = query.order_by(CALLS.c.created_at, CALLS.c.id).limit(batch)
            async with self._read() as conn:
                rows = (await conn.execute(query)).mappings().all()
            if not rows:
                return
            items = [CallRecord.model_validate(dict(r)) for r in rows]
            yield items
            last = (items[-1].created_at, items[-1].id)
            if len(rows) < batch:
                return

    # ------------------------------------------------------------------ event reads
    @staticmethod
    def _events(rows: Sequence[RowMapping]) -> list[EventRecord]:
        return [EventRecord.model_validate(dict(r)) for r in rows]

    async def call_events(self, session_id: str, tool_use_id: str) -> list[EventRecord]:
        """A call's events and those of its sub-calls, in recorded order."""
        query = (
            select(EVENTS)
            .where(
                EVENTS.c.session_id == session_id,
                or_(
                    EVENTS.c.tool_use_id == tool_use_id,
                    EVENTS.c.parent_tool_use_id == tool_use_id,
                ),
            )
            .order_by(EVENTS.c.seq)
        )
        async with self._read() as conn:
            return self._events((await conn.execute(query)).mappings().all())

    async def events_for_calls(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[EventRecord]]:
        """Events of many calls at once (export), keyed by (session_id, tool_use_id)."""
        out: dict[tuple[str, str], list[EventRecord]] = {k: [] for k in keys}
        if not keys:
            return out
        wanted = set(keys)
        for start in range(0, len(keys), 200):
            chunk = keys[start : start + 200]
            cond = or_(
                *[
                    and_(
                        EVENTS.c.session_id == s,
                        or_(EVENTS.c.tool_use_id == t, EVENTS.c.parent_tool_use_id == t),
                    )
                    for s, t in chunk
                ]
            )
            async with self._read() as conn:
                rows = (
                    (await conn.execute(select(EVENTS).where(cond).order_by(EVENTS.c.seq)))
                    .mappings()
                    .all()
                )
            for ev in self._events(rows):
                for tid in (ev.tool_use_id, ev.parent_tool_use_id):
                    key = (ev.session_id, tid or "")
                    if tid and key in wanted:
                        out[key].append(ev)
        return out

    async def timeline(self, session_id: str, tool_use_id: str) -> list[TimelineEntry]:
        """A call's events (with sub-calls') in order, with the time between them."""
        events = await self.call_events(session_id, tool_use_id)
        entries: list[TimelineEntry] = []
        for i, ev in enumerate(events):
            prev = events[i - 1].at if i else None
            entries.append(
                TimelineEntry(
                    event=ev,
                    since_previous_ms=(ev.at - prev).total_seconds() * 1000 if prev else None,
                    since_start_ms=(ev.at - events[0].at).total_seconds() * 1000,
                )
            )
        return entries

    async def events_after(
        self, session_id: str, after_seq: int = 0, limit: int = 500
    ) -> list[EventRecord]:
        """A session's events with seq > after_seq, oldest first (SSE resume)."""
        query = (
            select(EVENTS)
            .where(EVENTS.c.session_id == session_id, EVENTS.c.seq > after_seq)
            .order_by(EVENTS.c.seq)
            .limit(max(1, min(int(limit), 10_000)))
        )
        async with self._read() as conn:
            return self._events((await conn.execute(query)).mappings().all())

    async def last_seq(self, session_id: str | None = None) -> int:
        """The newest seq (of a session, or overall); 0 when there is none."""
        query = select(func.max(EVENTS.c.seq))
        if session_id is not None:
            query = query.where(EVENTS.c.session_id == session_id)
        async with self._read() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    # ------------------------------------------------------------------ approvals
    async def save_approval(self, approval: ApprovalRecord) -> None:
        """Insert or refresh an approval request (idempotent on request_id).

        A decision in `approval` is applied first-write-wins; a stored decision
        is never overwritten or cleared.
        """
        values = {
            "request_id": approval.request_id,
            "session_id": approval.session_id,
            "turn_id": approval.turn_id,
            "tool_use_id": approval.tool_use_id,
            "tool_name": approval.tool_name,
            "token_hash": approval.token_hash,
            "input_hash": approval.input_hash,
            "requested_at": as_utc(approval.requested_at),
            "expires_at": as_utc(approval.expires_at) if approval.expires_at else None,
            "info": normalize_json(redact(approval.info)),
        }
        await self._in_write(self._save_approval_in, _fit(APPROVALS, values), approval)

    def _save_approval_in(
        self, conn: Connection, values: dict[str, Any], approval: ApprovalRecord
    ) -> None:
        conn.execute(statements.upsert_approval(self.dialect, frozenset(values)), values)
        if approval.decision is not None:
            self._decide(
                conn,
                approval.request_id,
                approval.decision,
                approval.decided_by,
                approval.via,
                approval.reason,
                approval.decided_at,
                extra={
                    "principal_id": approval.principal_id,
                    "claimed_name": approval.claimed_name,
                    "self_approved": approval.self_approved,
                    "votes": approval.votes,
                },
            )

    @staticmethod
    def _approval(row: RowMapping | None) -> ApprovalRecord | None:
        return ApprovalRecord.model_validate(dict(row)) if row else None

    async def get_approval(self, request_id: str) -> ApprovalRecord | None:
        async with self._read() as conn:
            row = (
                (await conn.execute(select(APPROVALS).where(APPROVALS.c.request_id == request_id)))
                .mappings()
                .first()
            )
        return self._approval(row)

    async def get_approval_by_token_hash(self, token_hash: str) -> ApprovalRecord | None:
        async with self._read() as conn:
            row = (
                (await conn.execute(select(APPROVALS).where(APPROVALS.c.token_hash == token_hash)))
                .mappings()
                .first()
            )
        return self._approval(row)

    async def approvals_for_call(self, session_id: str, tool_use_id: str) -> list[ApprovalRecord]:
        query = (
            select(APPROVALS)
            .where(APPROVALS.c.session_id == session_id, APPROVALS.c.tool_use_id == tool_use_id)
            .order_by(APPROVALS.c.requested_at)
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ApprovalRecord.model_validate(dict(r)) for r in rows]

    async def waiting_approvals(
        self,
        *,
        project: str | None = None,
        session_id: str | None = None,
        tool_name: str | None = None,
        limit: int = 200,
    ) -> list[WaitingApproval]:
        """Undecided approval requests, newest first, with their session's project,
        their call's status (None for a composed tool's sub-call, which has no
        row) and its submitter: what an approver inbox lists, in one query.
        Expiry is the caller's to judge."""
        query = (
            select(APPROVALS, SESSIONS.c.project.label("_project"),
                   CALLS.c.status.label("_status"), SUBMISSIONS.c.key_id.label("_kid"),
                   SUBMISSIONS.c.key_name.label("_kname"))
            .join(SESSIONS, SESSIONS.c.session_id == APPROVALS.c.session_id)
            .outerjoin(CALLS, (CALLS.c.session_id == APPROVALS.c.session_id)
                       & (CALLS.c.tool_use_id == APPROVALS.c.tool_use_id))
            .outerjoin(SUBMISSIONS, (SUBMISSIONS.c.session_id == APPROVALS.c.session_id)
                       & (SUBMISSIONS.c.tool_use_id == APPROVALS.c.tool_use_id))
            .where(APPROVALS.c.decision.is_(None))
            .order_by(APPROVALS.c.requested_at.desc(), APPROVALS.c.request_id)
            .limit(max(1, min(int(limit), 1000)))
        )
        if project is not None:
            query = query.where(SESSIONS.c.project == project)
        if session_id:
            query = query.where(APPROVALS.c.session_id == session_id)
        if tool_name:
            query = query.where(APPROVALS.c.tool_name == tool_name)
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        out: list[WaitingApproval] = []
        for row in rows:
            data = dict(row)
            project_name = str(data.pop("_project"))
            status = data.pop("_status")
            kid, kname = data.pop("_kid"), data.pop("_kname")
            out.append(WaitingApproval(
                ApprovalRecord.model_validate(data), project_name,
                CallStatus(status) if status is not None else None,
                Submitter(key_id=kid, key_name=kname) if kid is not None else None,
            ))
        return out

    @staticmethod
    def _decide(
        conn: Connection,
        request_id: str,
        decision: str,
        decided_by: str | None,
        via: str | None,
        reason: str | None,
        decided_at: datetime | None,
        *,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """First write wins; `extra` carries the principal, the claim and the votes."""
        principal = {k: v for k, v in (extra or {}).items() if v is not None}
        result = conn.execute(
            update(APPROVALS)
            .where(APPROVALS.c.request_id == request_id, APPROVALS.c.decision.is_(None))
            .values(
                **_fit(
                    APPROVALS,
                    {
                        "decision": clean_text(decision),
                        "decided_by": clean_text(decided_by) if decided_by is not None else None,
                        "via": clean_text(via) if via is not None else None,
                        "reason": clean_text(reason) if reason is not None else None,
                        "decided_at": as_utc(decided_at) if decided_at else utcnow(),
                        **principal,
                    },
                )
            )
        )
        return bool(result.rowcount)

    async def decide_approval(
        self,
        request_id: str,
        decision: str,
        decided_by: str | None = None,
        via: str | None = None,
        reason: str | None = None,
        *,
        decided_at: datetime | None = None,
        principal: dict[str, Any] | None = None,
    ) -> tuple[bool, ApprovalRecord]:
        """Record a decision if none is stored yet (first write wins).

        `principal` carries principal_id / claimed_name / self_approved.
        Returns (won, the stored record — the winner's decision when lost).
        Raises ApprovalNotFoundError for an unknown request id.
        """
        def decide(conn: Connection) -> tuple[bool, RowMapping | None]:
            won = self._decide(conn, request_id, decision, decided_by, via, reason, decided_at,
                               extra=principal)
            query = select(APPROVALS).where(APPROVALS.c.request_id == request_id)
            return won, conn.execute(query).mappings().first()

        won, row = await self._in_write(decide)
        record = self._approval(row)
        if record is None:
            raise ApprovalNotFoundError(request_id)
        return won, record

    # ------------------------------------------------------------------ sessions
    async def register_session(
        self,
        session_id: str,
        workspace_path: str,
        kind: str = "main",
        *,
        project: str = DEFAULT_PROJECT,
        registered_by: str | None = None,
        worker_group: str | None = None,
        group_explicit: bool = False,
    ) -> tuple[SessionRecord, bool]:
        """Register a session; re-registering with the same workspace is a no-op.

        Returns (record, created). A different workspace (or another project)
        for a known id raises SessionConflictError; so does an explicitly
        requested worker group other than the stored one. A group derived from
        settings does not: a known session keeps the group it was registered with.
        """
        async with self._write() as conn:
            result = await conn.execute(
                statements.insert(self.dialect, SESSIONS)
                .values(
                    session_id=session_id,
                    workspace_path=workspace_path,
                    kind=kind,
                    created_at=utcnow(),
                    project=project,
                    registered_by=registered_by,
                    worker_group=worker_group,
                )
                .on_conflict_do_nothing(index_elements=["session_id"])
            )
            created = bool(result.rowcount)
            row = (
                (await conn.execute(select(SESSIONS).where(SESSIONS.c.session_id == session_id)))
                .mappings()
                .one()
            )
        record = SessionRecord.model_validate(dict(row))
        if record.project != project:
            raise SessionConflictError(session_id, None, workspace_path)
        if record.workspace_path != clean_text(workspace_path):
            raise SessionConflictError(session_id, record.workspace_path, workspace_path)
        if group_explicit and record.worker_group != worker_group:
            raise SessionConflictError(
                session_id, record.workspace_path, workspace_path,
                existing_group=record.worker_group, group=worker_group,
            )
        return record, created

    # ------------------------------------------------------------------ submitters
    async def record_submission(
        self, session_id: str, tool_use_ids: Sequence[str], key_id: str, key_name: str
    ) -> None:
        """Remember the key that submitted each call; the first submitter stays."""
        if not tool_use_ids:
            return
        now = utcnow()
        async with self._write() as conn:
            for tool_use_id in tool_use_ids:
                await conn.execute(
                    statements.insert(self.dialect, SUBMISSIONS)
                    .values(
                        session_id=session_id,
                        tool_use_id=tool_use_id,
                        key_id=key_id,
                        key_name=clean_text(key_name)[:200],
                        submitted_at=now,
                    )
                    .on_conflict_do_nothing(index_elements=["session_id", "tool_use_id"])
                )

    async def get_submitter(self, session_id: str, tool_use_id: str) -> Submitter | None:
        """The key that submitted this call first, or None (unknown/older calls)."""
        query = select(SUBMISSIONS.c.key_id, SUBMISSIONS.c.key_name).where(
            SUBMISSIONS.c.session_id == session_id, SUBMISSIONS.c.tool_use_id == tool_use_id
        )
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        return Submitter(key_id=row[0], key_name=row[1]) if row else None

    async def get_session(self, session_id: str) -> SessionRecord | None:
        async with self._read() as conn:
            row = (
                (await conn.execute(select(SESSIONS).where(SESSIONS.c.session_id == session_id)))
                .mappings()
                .first()
            )
        return SessionRecord.model_validate(dict(row)) if row else None

    # ------------------------------------------------------------------ API keys
    async def create_api_key(
        self,
        name: str,
        *,
        project: str = DEFAULT_PROJECT,
        roles: Sequence[str] = ("agent",),
    ) -> tuple[str, ApiKeyRecord]:
        """A new key: returns (the plaintext, shown once; the stored record).

        Raises ApiKeyNameTakenError when an active key already has the name,
        RoleError (a ValueError) for an unknown role.
        """
        name = name.strip()
        if not name or len(name) > 200:
            raise ValueError("an API key name must be 1-200 characters")
        if not re.fullmatch(PROJECT_PATTERN, project):
            raise ValueError("a project name is 1-100 letters, digits, _ . or -")
        role_list = normalize_roles(roles)
        plaintext = API_KEY_PREFIX + secrets.token_urlsafe(32)
        values = {
            "id": secrets.token_hex(8),
            "name": name,
            "key_hash": _hash_key(plaintext),
            "prefix": plaintext[:12],
            "created_at": utcnow(),
            "project": project,
            "roles": role_list,
            "migrated": False,
        }
        try:
            async with self._write() as conn:
                await conn.execute(API_KEYS.insert().values(**values))
        except IntegrityError as exc:
            raise ApiKeyNameTakenError(f"an active API key named {name!r} already exists") from exc
        return plaintext, ApiKeyRecord.model_validate(values)

    async def verify_api_key(self, plaintext: str) -> ApiKeyRecord | None:
        """The active key matching `plaintext`, or None (unknown or revoked)."""
        if not plaintext or not plaintext.startswith(API_KEY_PREFIX) or len(plaintext) > 200:
            return None
        key_hash = _hash_key(plaintext)
        async with self._read() as conn:
            row = (
                (
                    await conn.execute(
                        select(API_KEYS).where(
                            API_KEYS.c.key_hash == key_hash, API_KEYS.c.revoked_at.is_(None)
                        )
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            return None
        record = ApiKeyRecord.model_validate(dict(row))
        now = utcnow()
        if record.last_used_at is None or now - record.last_used_at > _LAST_USED_GRANULARITY:
            async with self._write() as conn:
                await conn.execute(
                    update(API_KEYS).where(API_KEYS.c.id == record.id).values(last_used_at=now)
                )
            record.last_used_at = now
        return record

    async def list_api_keys(self, include_revoked: bool = True) -> list[ApiKeyRecord]:
        query = select(API_KEYS).order_by(API_KEYS.c.created_at, API_KEYS.c.id)
        if not include_revoked:
            query = query.where(API_KEYS.c.revoked_at.is_(None))
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ApiKeyRecord.model_validate(dict(r)) for r in rows]

    async def revoke_api_key(self, name_or_id: str) -> ApiKeyRecord:
        """Revoke the active key with this name or id; ApiKeyNotFoundError otherwise."""
        now = utcnow()
        match = and_(
            or_(API_KEYS.c.id == name_or_id, API_KEYS.c.name == name_or_id),
            API_KEYS.c.revoked_at.is_(None),
        )
        async with self._write() as conn:
            row = (await conn.execute(select(API_KEYS).where(match))).mappings().first()
            if row is None:
                raise ApiKeyNotFoundError(f"no active API key named or with id {name_or_id!r}")
            await conn.execute(
                update(API_KEYS).where(API_KEYS.c.id == row["id"]).values(revoked_at=now)
            )
        record = ApiKeyRecord.model_validate(dict(row))
        record.revoked_at = now
        return record

    # ------------------------------------------------------------------ audit
    async def verify_chain(self, session_id: str | None = None) -> VerifyReport:
        """Re-compute every chain; the report names each broken chain's first bad event."""
        report = VerifyReport()
        head_query = select(CHAINS)
        ev_query = select(EVENTS).order_by(EVENTS.c.session_id, EVENTS.c.chain_id, EVENTS.c.seq)
        if session_id is not None:
            head_query = head_query.where(CHAINS.c.session_id == session_id)
            ev_query = ev_query.where(EVENTS.c.session_id == session_id)
        async with self._read() as conn:
            heads = {
                (r["session_id"], r["chain_id"]): dict(r)
                for r in (await conn.execute(head_query)).mappings()
            }
            seen: set[tuple[str, str]] = set()
            current: tuple[str, str] | None = None
            bucket: list[dict[str, Any]] = []

            def flush() -> None:
                if current is None:
                    return
                seen.add(current)
                report.chains += 1
                report.events += len(bucket)
                found = check_chain(current[0], current[1], bucket, heads.get(current))
                if found is not None:
                    report.problems.append(found)

            result = await conn.stream(ev_query.execution_options(yield_per=1000))
            async for row in result.mappings():
                key = (row["session_id"], row["chain_id"])
                if key != current:
                    flush()
                    current, bucket = key, []
                bucket.append(dict(row))
            flush()
        for key, head in heads.items():
            if key not in seen and head["length"] > 0:
                report.chains += 1
                found = check_chain(key[0], key[1], [], head)
                if found is not None:
                    report.problems.append(found)
        report.problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
        return report

    async def verify_meaning(self, session_id: str | None = None) -> MeaningReport:
        """Check what every call's history says (dispatcher/store/semantics.py)
        and report each recorded integrity error (event_conflicts)."""
        ev_query = select(
            EVENTS.c.session_id,
            EVENTS.c.tool_use_id,
            EVENTS.c.type,
            EVENTS.c.request_id,
            EVENTS.c.data,
        ).order_by(EVENTS.c.seq)
        call_query = select(
            CALLS.c.session_id,
            CALLS.c.tool_use_id,
            CALLS.c.request_id,
            CALLS.c.decision,
            CALLS.c.decided_by,
            CALLS.c.status,
        )
        approval_query = select(
            APPROVALS.c.request_id,
            APPROVALS.c.session_id,
            APPROVALS.c.tool_use_id,
            APPROVALS.c.decision,
            APPROVALS.c.decided_by,
        )
        if session_id is not None:
            ev_query = ev_query.where(EVENTS.c.session_id == session_id)
            call_query = call_query.where(CALLS.c.session_id == session_id)
            approval_query = approval_query.where(APPROVALS.c.session_id == session_id)
        events: dict[tuple[str, str], list[dict[str, Any]]] = {}
        async with self._read() as conn:
            result = await conn.stream(ev_query.execution_options(yield_per=1000))
            async for row in result.mappings():
                events.setdefault((row["session_id"], row["tool_use_id"]), []).append(dict(row))
            calls = {
                (r["session_id"], r["tool_use_id"]): dict(r)
                for r in (await conn.execute(call_query)).mappings()
            }
            approvals: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
            for r in (await conn.execute(approval_query)).mappings():
                key = (r["session_id"], r["tool_use_id"])
                approvals.setdefault(key, {})[r["request_id"]] = dict(r)
        report = MeaningReport()
        for key in sorted(set(events) | set(calls) | set(approvals)):
            report.calls += 1
            report.problems.extend(
                semantics.check_call(
                    key[0], key[1], events.get(key, []), calls.get(key), approvals.get(key, {})
                )
            )
        for conflict in await self.event_conflicts(session_id):
            report.problems.append(
                semantics.MeaningProblem(
                    session_id=conflict["session_id"],
                    tool_use_id=conflict["tool_use_id"],
                    detail=(
                        f"integrity error: {conflict['type']} {conflict['event_id']} was "
                        f"written again with other content (stored "
                        f"{_brief(conflict['stored'])}, attempted {_brief(conflict['attempted'])})"
                    ),
                )
            )
        return report

    async def export(
        self,
        fmt: ExportFormat,
        out: IO[str],
        filters: CallFilters | None = None,
        *,
        include_events: bool = True,
        on_progress: audit_export.Progress | None = None,
    ) -> int:
        """Write matching calls (oldest first) as JSON Lines or CSV; returns the count."""
        return await audit_export.export_calls(
            self, fmt, out, filters, include_events=include_events, on_progress=on_progress
        )

    async def prune(self, older_than: timedelta, *, now: datetime | None = None) -> int:
        """Delete finished calls older than `older_than` with their events and approvals.

        Chains are per call, so removing a whole call never breaks another
        chain. Only terminal calls are removed (by finished_at, else updated_at);
        a composed call's sub-call rows go with it, and so do blobs no retained
        call refers to (`prune_blobs`). Returns the number of `tool_calls` rows
        deleted.
        """
        cutoff = as_utc(now or utcnow()) - older_than
        finished = func.coalesce(CALLS.c.finished_at, CALLS.c.updated_at)
        victims_q = (
            select(CALLS.c.session_id, CALLS.c.tool_use_id)
            .where(
                CALLS.c.status.in_(TERMINAL),
                finished < cutoff,
                CALLS.c.parent_tool_use_id.is_(None),
            )
            .order_by(CALLS.c.id)
            .limit(_BATCH)
        )
        total = 0
        while True:
            async with self._write() as conn:
                victims = [(r.session_id, r.tool_use_id) for r in await conn.execute(victims_q)]
                if not victims:
                    break
                await conn.run_sync(self._lock_sessions, {s for s, _ in victims})
                for sid, tid in victims:
                    await conn.execute(
                        delete(EVENTS).where(EVENTS.c.session_id == sid, EVENTS.c.chain_id == tid)
                    )
                    await conn.execute(
                        delete(CHAINS).where(CHAINS.c.session_id == sid, CHAINS.c.chain_id == tid)
                    )
                    sub_calls = select(CALLS.c.tool_use_id).where(
                        CALLS.c.session_id == sid, CALLS.c.parent_tool_use_id == tid
                    )
                    await conn.execute(
                        delete(APPROVALS).where(
                            APPROVALS.c.session_id == sid,
                            or_(
                                APPROVALS.c.tool_use_id == tid,
                                APPROVALS.c.tool_use_id.in_(sub_calls),
                                _sub_call_approval(sid, tid),
                            ),
                        )
                    )
                    result = await conn.execute(
                        delete(CALLS).where(
                            CALLS.c.session_id == sid,
                            or_(CALLS.c.tool_use_id == tid, CALLS.c.parent_tool_use_id == tid),
                        )
                    )
                    total += int(result.rowcount or 0)
        # The large payloads of the removed calls (dispatcher.blobs) go too.
        await self.prune_blobs(older_than, now=now)
        return total

    # ------------------------------------------------------------------ blobs
    async def put_blob(self, blob_id: str, data: bytes, size: int, workflow_id: str) -> None:
        """Store a sealed blob once (content-addressed) and the workflow that refers to it.

        Idempotent: the same id is written once; each (blob, workflow) pair once.
        """
        now = utcnow()
        blob = {"id": blob_id, "size": size, "data": data, "created_at": now}
        ref = {"blob_id": blob_id, "workflow_id": workflow_id[:500], "created_at": now}

        def work(conn: Connection) -> None:
            conn.execute(
                statements.insert(self.dialect, BLOBS)
                .values(**blob)
                .on_conflict_do_nothing(index_elements=["id"])
            )
            conn.execute(
                statements.insert(self.dialect, BLOB_REFS)
                .values(**ref)
                .on_conflict_do_nothing(index_elements=["blob_id", "workflow_id"])
            )

        await self._in_write(work)

    async def get_blob(self, blob_id: str) -> bytes | None:
        """The sealed content of a blob, or None when it is not stored."""
        async with self._read() as conn:
            row = (await conn.execute(select(BLOBS.c.data).where(BLOBS.c.id == blob_id))).first()
        return None if row is None else bytes(row.data)

    async def blob_ids(self) -> list[str]:
        """Every stored blob id (for tests and `audit` tooling)."""
        async with self._read() as conn:
            return [r.id for r in await conn.execute(select(BLOBS.c.id).order_by(BLOBS.c.id))]

    async def prune_blobs(self, older_than: timedelta, *, now: datetime | None = None) -> int:
        """Delete blobs no retained call refers to; returns how many blobs went.

        A reference stays while its workflow is a call (`call/<session>/<id>`)
        or a turn (`turn/<session>/...`) with a row in tool_calls, or while it
        is younger than the cutoff (a call being started has no row yet).
        """
        cutoff = as_utc(now or utcnow()) - older_than
        call_wf = literal("call/") + CALLS.c.session_id + literal("/") + CALLS.c.tool_use_id
        turn_wf = literal("turn/") + CALLS.c.session_id + literal("/%")
        retained = or_(
            exists().where(call_wf == BLOB_REFS.c.workflow_id),
            exists().where(BLOB_REFS.c.workflow_id.like(turn_wf)),
        )
        async with self._write() as conn:
            await conn.execute(
                delete(BLOB_REFS).where(BLOB_REFS.c.created_at < cutoff, ~retained)
            )
            result = await conn.execute(
                delete(BLOBS).where(
                    BLOBS.c.created_at < cutoff,
                    ~exists().where(BLOB_REFS.c.blob_id == BLOBS.c.id),
                )
            )
            return int(result.rowcount or 0)


def _sub_call_approval(session_id: str, tool_use_id: str) -> ColumnElement[bool]:
    """Approvals of a composed call's sub-calls: id `<parent>.<n>`, and no call row.

    Sub-calls are not stored as `tool_calls` rows; their approvals carry the
    sub-call id, so they are found by that id's prefix.
    """
    escaped = tool_use_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = select(CALLS.c.tool_use_id).where(CALLS.c.session_id == session_id)
    return and_(
        APPROVALS.c.tool_use_id.like(f"{escaped}.%", escape="\\"),
        APPROVALS.c.tool_use_id.not_in(rows),
    )


def _conforms(repo: Repository) -> HistoryStore:
    """Static check (mypy): Repository implements the HistoryStore protocol."""
    return repo
