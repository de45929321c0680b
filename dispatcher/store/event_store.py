"""Events and their hash chains: appending (idempotent, chained per call),
recording conflicting rewrites, and reading events back.

Event appends for one session are serialized (PostgreSQL: a
transaction-scoped advisory lock per session; SQLite: BEGIN IMMEDIATE), which
keeps each call's hash chain linear and makes `seq` commit in order within a
session, so an SSE reader resuming after `seq` N never misses an event that
commits later with a smaller number.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection, RowMapping

from parkgate.calls.events import ToolEvent
from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import BATCH, StoreBase, enum_value, fit
from parkgate.store.canonical import event_hash, normalize_json, redact
from parkgate.store.chain import GENESIS
from parkgate.store.results import EventRecord, TimelineEntry
from parkgate.store.statements import CONFLICTS, EVENTS
from parkgate.store.types import as_utc

#: The repository's logger name, kept so log filters and alerts still match.
log = logging.getLogger("parkgate.store.repository")


def _chain_id(event: ToolEvent) -> str:
    """Sub-call events join the chain of the call that composed them."""
    return event.parent_tool_use_id or event.tool_use_id


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


class EventStore(StoreBase):
    """Appends events to their chains and reads them back."""

    # ------------------------------------------------------------------ writes
    @staticmethod
    def _event_fields(ev: ToolEvent) -> dict[str, Any]:
        """The stored (hashed) fields of an event, minus its place in the chain."""
        return fit(
            EVENTS,
            {
                "event_id": ev.event_id,
                "chain_id": _chain_id(ev),
                "type": ev.type,
                "session_id": ev.session_id,
                "turn_id": ev.turn_id,
                "tool_use_id": ev.tool_use_id,
                "tool_name": ev.tool_name,
                "side_effects": enum_value(ev.side_effects),
                "at": as_utc(ev.at),
                "request_id": ev.request_id,
                "error_class": enum_value(ev.error_class),
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
        for start in range(0, len(ids), BATCH):
            chunk = ids[start : start + BATCH]
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

    # ------------------------------------------------------------------ reads
    @staticmethod
    def _events(rows: Sequence[RowMapping]) -> list[EventRecord]:
        return [EventRecord.model_validate(dict(r)) for r in rows]

    async def get_event(self, event_id: str) -> EventRecord | None:
        """One event by its id (ids are deterministic: parkgate.calls.events.make_event_id)."""
        row = await self._first(select(EVENTS).where(EVENTS.c.event_id == event_id))
        return self._events([row])[0] if row is not None else None

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
