"""parkgate's Prometheus metric families, in one registry of their own (a
dedicated registry keeps several apps in one test process from colliding).

Imported on first use by parkgate.api.shared.metrics (a count, an
observation or a scrape), not with the app: prometheus_client, with the
standard library's HTTP server and WSGI modules its exposition imports, is
about 1.2 MB an API at rest would hold before anything is counted.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
