"""Audit maintenance: verify the hash chains and what each call's history
says, export calls, and prune finished calls (with their events, approvals,
sub-call rows and the blobs nobody refers to any more)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import IO, Any, Literal

from sqlalchemy import ColumnElement, and_, delete, func, or_, select

from parkgate.models import utcnow
from parkgate.store import audit_export, semantics
from parkgate.store.base import BATCH
from parkgate.store.blob_store import BlobTables
from parkgate.store.budget_store import CHARGES
from parkgate.store.call_store import CallStore
from parkgate.store.chain import check_chain
from parkgate.store.prompt_store import PromptStore
from parkgate.store.results import CallFilters, MeaningReport, VerifyReport
from parkgate.store.statements import APPROVALS, CALLS, CHAINS, EVENTS, TERMINAL
from parkgate.store.types import as_utc

ExportFormat = Literal["jsonl", "csv"]


def _brief(meaning: dict[str, Any]) -> str:
    """The part of an event's meaning a conflict is usually about."""
    data = meaning.get("data") or {}
    keys = ("decision", "decided_by", "via")
    parts = [f"{k}={data[k]}" for k in keys if k in data]
    if meaning.get("error_class"):
        parts.append(f"error_class={meaning['error_class']}")
    return ", ".join(parts) or json.dumps(data, sort_keys=True, default=str)[:200]


class AuditStore(CallStore, BlobTables, PromptStore):
    """Checks, export and retention over calls, events, approvals and blobs."""

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
            CALLS.c.principal_id,
            CALLS.c.identity,
        )
        approval_query = select(
            APPROVALS.c.request_id,
            APPROVALS.c.session_id,
            APPROVALS.c.tool_use_id,
            APPROVALS.c.decision,
            APPROVALS.c.decided_by,
            APPROVALS.c.principal_id,
            APPROVALS.c.identity,
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
        call refers to (`prune_blobs`), and turn prompts no call is filed under
        (`prune_prompts`), and its budget charges (the budgets' windows keep
        what they counted). Returns the number of `tool_calls` rows
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
            .limit(BATCH)
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
                    # Its budget charges (settled: the call ended); windows keep their counts.
                    await conn.execute(delete(CHARGES).where(CHARGES.c.session_id == sid,
                                                             CHARGES.c.tool_use_id == tid))
                    result = await conn.execute(
                        delete(CALLS).where(
                            CALLS.c.session_id == sid,
                            or_(CALLS.c.tool_use_id == tid, CALLS.c.parent_tool_use_id == tid),
                        )
                    )
                    total += int(result.rowcount or 0)
        # The large payloads of the removed calls (parkgate.durable.blobs) go
        # too, and Claude Code turns' prompts no call refers to any more.
        await self.prune_blobs(older_than, now=now)
        await self.prune_prompts(cutoff)
        return total


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


