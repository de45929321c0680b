"""Call rows: the write that stores a call's events with its row in one
transaction (idempotent), and the reads that list and page calls.

`apply` / `record` are safe under concurrent callers; a call row's terminal
status is never overwritten by a non-terminal one (statements.upsert_call).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, tuple_
from sqlalchemy.engine import Connection

from parkgate.approvals.decisions import decider_query
from parkgate.calls.events import ToolEvent, make_event_id
from parkgate.calls.records import CallStatus, CallUpdate, RecordedFinish
from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import BATCH, enum_value, fit
from parkgate.store.budget_store import settle_charges
from parkgate.store.canonical import clean_text, normalize_json, redact
from parkgate.store.errors import InvalidCursorError
from parkgate.store.event_store import EventStore
from parkgate.store.results import CallFilters, CallRecord, Page
from parkgate.store.statements import CALLS, SESSIONS, TERMINAL
from parkgate.store.types import as_utc

#: A call's final events: exactly one of them may be stored.
_FINAL_TYPES = ("tool.completed", "tool.failed")


class CallStore(EventStore):
    """A call's row, written together with its events (hence over EventStore)."""

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
        added = await self._in_write(self._record_in, events, update)
        self._committed(update)
        return added

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
        stored = await self._in_write(self._record_unless_finished_in, events, update)
        self._committed(update)
        return stored

    def _committed(self, update: CallUpdate | None) -> None:
        """Wake this process's long-polls once a final row is committed (a stored
        final row that this write left alone counts too: the call has ended), or
        a row a claiming submit answers on (a hint: waiters read the row again)."""
        if update is not None and update.status is not None and (
            update.status.answerable
            # A submit that claims answers on these too (api/agents/client_calls.py).
            or update.status in (CallStatus.CLAIMED, CallStatus.PARKED)
        ):
            self.final_rows.committed(update.session_id, update.tool_use_id)

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
                value = clean_text(enum_value(value))
            values[name] = enum_value(value)
        return values

    def _upsert_call(self, conn: Connection, update: CallUpdate) -> None:
        values = fit(CALLS, self._call_values(update))
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
        if "status" in values and values["status"] in TERMINAL:
            # A call's budget charges end with it (store/budget_store.py).
            settle_charges(conn, update.session_id, update.tool_use_id)

    async def update_call(self, update: CallUpdate) -> None:
        """Upsert just the call row (no events)."""
        await self.record([], update)

    # ------------------------------------------------------------------ call reads
    async def get_calls(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CallRecord]:
        """Many call rows in one read, by (session_id, tool_use_id): a page that
        shows a hundred requests asks once, not a hundred times."""
        wanted = sorted(set(keys))
        found: dict[tuple[str, str], CallRecord] = {}
        for start in range(0, len(wanted), BATCH):
            chunk = wanted[start:start + BATCH]
            query = select(CALLS).where(
                tuple_(CALLS.c.session_id, CALLS.c.tool_use_id).in_(chunk))
            async with self._read() as conn:
                rows = (await conn.execute(query)).mappings().all()
            for row in rows:
                found[(row["session_id"], row["tool_use_id"])] = CallRecord.model_validate(
                    dict(row))
        return found

    async def get_call(self, session_id: str, tool_use_id: str) -> CallRecord | None:
        row = await self._first(
            select(CALLS).where(
                CALLS.c.session_id == session_id, CALLS.c.tool_use_id == tool_use_id
            )
        )
        return CallRecord.model_validate(dict(row)) if row else None

    async def calls_by_prefix(
        self, tool_use_prefix: str, session_prefix: str | None = None, *, limit: int = 2
    ) -> list[tuple[str, str]]:
        """(session_id, tool_use_id) of calls whose ids start with these prefixes
        (the shortened ids a listing prints), at most `limit`."""
        clauses = [CALLS.c.tool_use_id.startswith(tool_use_prefix, autoescape=True)]
        if session_prefix is not None:
            clauses.append(CALLS.c.session_id.startswith(session_prefix, autoescape=True))
        query = (select(CALLS.c.session_id, CALLS.c.tool_use_id).where(*clauses)
                 .order_by(CALLS.c.id).limit(limit))
        async with self._read() as conn:
            return [(row.session_id, row.tool_use_id) for row in await conn.execute(query)]

    async def request_ids_by_prefix(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Approval request ids starting with `prefix` (a listing's shortened id)."""
        query = (select(statements.APPROVALS.c.request_id)
                 .where(statements.APPROVALS.c.request_id.startswith(prefix, autoescape=True))
                 .order_by(statements.APPROVALS.c.request_id).limit(limit))
        async with self._read() as conn:
            return [row.request_id for row in await conn.execute(query)]

    @staticmethod
    def _filter_clauses(filters: CallFilters | None) -> list[ColumnElement[bool]]:
        if filters is None:
            return []
        clauses: list[ColumnElement[bool]] = []
        for name in ("session_id", "turn_id", "tool_name", "side_effects"):
            value = getattr(filters, name)
            if value is not None:
                clauses.append(CALLS.c[name] == enum_value(value))
        if filters.decided_by is not None:
            clauses.append(CallStore._decider_clause(filters.decided_by))
        if filters.status is not None:
            statuses = filters.status if isinstance(filters.status, list) else [filters.status]
            clauses.append(CALLS.c.status.in_([enum_value(s) for s in statuses]))
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
    def _decider_clause(text: str) -> ColumnElement[bool]:
        """`decided_by` as listings show it (decider_query): the authenticated
        decider, the name typed on a generic link (no decider), or either."""
        name, verified = decider_query(text)
        authenticated = CALLS.c.decided_by == name
        claimed = and_(CALLS.c.decided_by.is_(None), CALLS.c.claimed_name == name)
        if verified is None:
            return or_(authenticated, claimed)
        return authenticated if verified else claimed

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

    async def oldest_with_input(self, filters: CallFilters,
                                input_hash: str | Sequence[str]) -> str | None:
        """The tool_use_id of the oldest call matching `filters` whose input has
        this hash (tool and canonical input; any of several: its forms before
        and after RFC 8785), or None: one indexed one-row read where a page of
        calls filtered here would cost a whole read."""
        hashes = [input_hash] if isinstance(input_hash, str) else list(input_hash)
        row = await self._first(
            select(CALLS.c.tool_use_id)
            .where(*self._filter_clauses(filters), CALLS.c.input_hash.in_(hashes))
            .order_by(CALLS.c.created_at, CALLS.c.id)
            .limit(1)
        )
        return row["tool_use_id"] if row is not None else None

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
        self, filters: CallFilters | None = None, batch: int = BATCH
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

