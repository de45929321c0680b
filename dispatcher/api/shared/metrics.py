"""Prometheus metrics for parkgate, in one registry of their own.

Gauges of calls by status and of parked calls are refreshed from the history
store at scrape time (so they are right whichever process ran the calls).
Approval latency is observed where a decision lands over HTTP (API or link);
tool durations are read from calls that finished since the previous scrape.
The families themselves (parkgate.api.shared.metric_families, and
prometheus_client with them) load with the first count or scrape; their
names are read through this module as before (`metrics.REGISTRY`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, func, select

from parkgate.calls.records import LIVE_STATUSES, CallStatus

if TYPE_CHECKING:
    from parkgate.api.shared.metric_families import (
        API_SUBMISSIONS,
        APPROVAL_LATENCY,
        CALLS_BY_STATUS,
        DECISIONS,
        INTEGRITY_ERRORS,
        OPEN_TOO_LONG,
        PARKED,
        REGISTRY,
        TOOL_DURATION,
    )
    from parkgate.store.repository import Repository

__all__ = ["API_SUBMISSIONS", "APPROVAL_LATENCY", "CALLS_BY_STATUS", "DECISIONS",
           "INTEGRITY_ERRORS", "OPEN_TOO_LONG", "PARKED", "REGISTRY", "TOOL_DURATION",
           "StoreSampler", "render"]


def _families() -> ModuleType:
    """parkgate.api.shared.metric_families, imported the first time a metric is used."""
    return importlib.import_module("parkgate.api.shared.metric_families")


def __getattr__(name: str) -> Any:
    """The metric families by name (`metrics.INTEGRITY_ERRORS`), loaded on first use."""
    if name.isupper() and not name.startswith("_"):
        value = getattr(_families(), name, None)
        if value is not None:
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Tool names that may appear as a `tool` label (the registries of the apps in
#: this process); anything else is counted as UNKNOWN so a client cannot grow
#: the series without bound by sending made-up names.
_KNOWN_TOOLS: set[str] = set()
UNKNOWN = "unknown"
DECISION_LABELS = frozenset({"allow", "deny", "allow_with_edits"})
VIA_LABELS = frozenset({"api", "link", "slack", "inbox"})
OUTCOME_LABELS = frozenset({"won", "lost", "counted"})
_STATUS_LABELS = frozenset(s.value for s in CallStatus)


def register_tool_names(names: Iterable[str]) -> None:
    """Allow these registered tool names as `tool` label values."""
    _KNOWN_TOOLS.update(names)


def tool_label(name: str | None) -> str:
    """`name` when it is a registered tool, else "unknown"."""
    return name if name is not None and name in _KNOWN_TOOLS else UNKNOWN


def bounded(value: str, allowed: frozenset[str]) -> str:
    """`value` when it is one of the fixed label values, else "unknown"."""
    return value if value in allowed else UNKNOWN


def set_status_counts(counts: Mapping[str, int]) -> None:
    """Refresh the by-status gauges (every status gets a sample, zero when absent)."""
    families = _families()
    for status in CallStatus:
        families.CALLS_BY_STATUS.labels(status=status.value).set(counts.get(status.value, 0))
    families.PARKED.set(counts.get(CallStatus.PARKED.value, 0))


def observe_approval_latency(decision: str, via: str, seconds: float) -> None:
    _families().APPROVAL_LATENCY.labels(
        decision=bounded(decision, DECISION_LABELS), via=bounded(via, VIA_LABELS)
    ).observe(max(seconds, 0.0))


def count_decision(decision: str, outcome: str) -> None:
    _families().DECISIONS.labels(
        decision=bounded(decision, DECISION_LABELS), outcome=bounded(outcome, OUTCOME_LABELS)
    ).inc()


def count_submission(tool: str) -> None:
    _families().API_SUBMISSIONS.labels(tool=tool_label(tool)).inc()


def observe_tool_duration(tool: str, status: str, seconds: float) -> None:
    _families().TOOL_DURATION.labels(
        tool=tool_label(tool), status=bounded(status, _STATUS_LABELS)
    ).observe(max(seconds, 0.0))


def render() -> tuple[bytes, str]:
    """The exposition text and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(_families().REGISTRY), CONTENT_TYPE_LATEST


class StoreSampler:
    """Refreshes the gauges and feeds the tool-duration histogram from the store.

    Each scrape counts calls by status with one GROUP BY and observes the
    duration of every call that finished since the previous scrape (rows
    seen in the overlap window are remembered by id, so none is counted
    twice). Reading the store keeps the numbers right when workers run in
    other processes than the API.
    """

    #: How far back each scrape looks, to catch rows committed late.
    overlap = timedelta(minutes=5)

    def __init__(self, open_report_seconds: float = 24 * 3600.0) -> None:
        #: settings.open_call_report_seconds: what OPEN_TOO_LONG counts.
        self.open_report_seconds = open_report_seconds
        self._since: datetime = datetime.now(UTC)
        self._seen: dict[int, datetime] = {}
        self._scraped = False

    async def refresh(self, repo: Repository) -> None:
        calls = _calls_table()
        async with repo.engine.connect() as conn:
            rows = (
                await conn.execute(select(calls.c.status, func.count()).group_by(calls.c.status))
            ).all()
            set_status_counts({str(status): int(n) for status, n in rows})
            opened_before = datetime.now(UTC) - timedelta(seconds=self.open_report_seconds)
            families = _families()
            families.OPEN_TOO_LONG.set(int((await conn.execute(
                select(func.count()).select_from(calls).where(
                    calls.c.status.in_([s.value for s in LIVE_STATUSES]),
                    calls.c.created_at < opened_before)
            )).scalar_one()))
            conflicts = _conflicts_table()
            families.INTEGRITY_ERRORS.set(
                int((await conn.execute(select(func.count()).select_from(conflicts))).scalar_one())
            )
            # The first scrape counts from process start; later ones overlap.
            window = self._since - self.overlap if self._scraped else self._since
            finished = (
                await conn.execute(
                    select(
                        calls.c.id,
                        calls.c.tool_name,
                        calls.c.status,
                        calls.c.duration_ms,
                    ).where(
                        calls.c.finished_at.is_not(None),
                        calls.c.finished_at >= window,
                        calls.c.duration_ms.is_not(None),
                    )
                )
            ).all()
        now = datetime.now(UTC)
        for row_id, tool, status, duration_ms in finished:
            if row_id in self._seen:
                continue
            self._seen[row_id] = now
            observe_tool_duration(str(tool or "unknown"), str(status), float(duration_ms) / 1000)
        cutoff = now - 2 * self.overlap
        self._seen = {k: v for k, v in self._seen.items() if v >= cutoff}
        self._since = now
        self._scraped = True


def _calls_table() -> Table:
    from parkgate.store.repository import CALLS

    return CALLS


def _conflicts_table() -> Table:
    from parkgate.store.statements import CONFLICTS

    return CONFLICTS


def log_refresh_failure() -> None:
    import logging

    logging.getLogger("parkgate.api.shared.metrics").warning(
        "could not refresh metrics from the history store", exc_info=True
    )
