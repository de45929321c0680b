"""Prometheus metrics for parkgate, in one registry of their own.

Gauges of calls by status and of parked calls are refreshed from the history
store at scrape time (so they are right whichever process ran the calls).
Approval latency is observed where a decision lands over HTTP (API or link);
tool durations are read from calls that finished since the previous scrape.
A dedicated registry keeps several apps in one test process from colliding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from sqlalchemy import Table, func, select

from parkgate.calls.records import LIVE_STATUSES, CallStatus

if TYPE_CHECKING:
    from parkgate.store.repository import Repository

REGISTRY = CollectorRegistry(auto_describe=True)

CALLS_BY_STATUS = Gauge(
    "parkgate_calls",
    "Tool calls in the history store, by current status.",
    ["status"],
    registry=REGISTRY,
)
PARKED = Gauge(
    "parkgate_parked_calls",
    "Tool calls currently parked waiting for a human decision.",
    registry=REGISTRY,
)
APPROVAL_LATENCY = Histogram(
    "parkgate_approval_latency_seconds",
    "Time from approval request to decision.",
    ["decision", "via"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600),
    registry=REGISTRY,
)
TOOL_DURATION = Histogram(
    "parkgate_tool_duration_seconds",
    "Wall time of tool executions.",
    ["tool", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)
OPEN_TOO_LONG = Gauge(
    "parkgate_calls_open_too_long",
    "Tool calls not ended (queued, parked, running, released, claimed) created longer "
    "ago than open_call_report_seconds: a wait that may have no end (parkgate calls "
    "list --open-longer-than lists them).",
    registry=REGISTRY,
)
INTEGRITY_ERRORS = Gauge(
    "parkgate_store_integrity_errors",
    "Event writes that contradicted a stored event of the same id (event_conflicts "
    "rows; each one is also logged). Anything above 0 needs an operator.",
    registry=REGISTRY,
)
API_SUBMISSIONS = Counter(
    "parkgate_api_tool_calls_submitted",
    "Tool calls submitted over the HTTP API (including re-attachments).",
    ["tool"],
    registry=REGISTRY,
)
DECISIONS = Counter(
    "parkgate_decisions",
    "Approval decisions attempted over HTTP, by outcome (won or lost).",
    ["decision", "outcome"],
    registry=REGISTRY,
)

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
    for status in CallStatus:
        CALLS_BY_STATUS.labels(status=status.value).set(counts.get(status.value, 0))
    PARKED.set(counts.get(CallStatus.PARKED.value, 0))


def observe_approval_latency(decision: str, via: str, seconds: float) -> None:
    APPROVAL_LATENCY.labels(
        decision=bounded(decision, DECISION_LABELS), via=bounded(via, VIA_LABELS)
    ).observe(max(seconds, 0.0))


def count_decision(decision: str, outcome: str) -> None:
    DECISIONS.labels(
        decision=bounded(decision, DECISION_LABELS), outcome=bounded(outcome, OUTCOME_LABELS)
    ).inc()


def count_submission(tool: str) -> None:
    API_SUBMISSIONS.labels(tool=tool_label(tool)).inc()


def observe_tool_duration(tool: str, status: str, seconds: float) -> None:
    TOOL_DURATION.labels(tool=tool_label(tool), status=bounded(status, _STATUS_LABELS)).observe(
        max(seconds, 0.0)
    )


def render() -> tuple[bytes, str]:
    """The exposition text and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


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
            OPEN_TOO_LONG.set(int((await conn.execute(
                select(func.count()).select_from(calls).where(
                    calls.c.status.in_([s.value for s in LIVE_STATUSES]),
                    calls.c.created_at < opened_before)
            )).scalar_one()))
            conflicts = _conflicts_table()
            INTEGRITY_ERRORS.set(
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
