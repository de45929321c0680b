"""The retry policy both clients share (`_common.Retry`): pure decisions, no server."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from parkgate.agent_client import UnavailableError
from parkgate.agent_client._common import MAX_BACKOFF, MAX_RETRY_SLEEP, Retry, backoff

WHERE = "http://127.0.0.1:9"
REFUSED = httpx.ConnectError("[Errno 111] Connection refused")


def test_backoff_is_capped_and_jittered() -> None:
    assert backoff(0, lambda: 0.0) == 0.125 and backoff(0, lambda: 1.0) == 0.25
    assert backoff(30, lambda: 1.0) == MAX_BACKOFF
    assert backoff(30, lambda: 0.0) == MAX_BACKOFF / 2


def test_without_a_deadline_it_retries_and_logs_one_line_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="parkgate.agent_client")
    retry = Retry(WHERE)
    delays = [retry.failed(error=REFUSED) for _ in range(50)]
    assert all(0 < d <= MAX_BACKOFF for d in delays)
    retry.answered()
    busy = httpx.Response(503, headers={"Retry-After": "120"})
    assert retry.failed(response=busy) == MAX_RETRY_SLEEP  # a bad header cannot stall it
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings  # two outages: a line each, and the end of the first
    assert "ConnectError" in warnings[0] and "until it answers" in warnings[0]
    # At the "unavailable" line's level: whoever saw the outage sees it end.
    assert "answered again" in warnings[1]
    assert "HTTP 503" in warnings[2]


def test_the_calls_deadline_ends_the_retries_with_unavailable_error() -> None:
    retry = Retry(WHERE, deadline=time.monotonic() + 3600)
    assert retry.failed(error=REFUSED) <= MAX_BACKOFF
    over = Retry(WHERE, deadline=time.monotonic() - 1)
    with pytest.raises(UnavailableError) as exc:
        over.failed(error=REFUSED)
    assert exc.value.code == "unreachable" and WHERE in exc.value.message
    answered = Retry(WHERE, deadline=time.monotonic() - 1)
    body = {"error": {"code": "temporal_unavailable", "message": "down"}}
    with pytest.raises(UnavailableError) as busy:
        answered.failed(response=httpx.Response(503, json=body))
    assert busy.value.code == "temporal_unavailable"


def test_span_and_max_retries_bound_one_outage() -> None:
    spanned = Retry(WHERE, span=0.0)
    with pytest.raises(UnavailableError):
        spanned.failed(error=REFUSED)
    counted = Retry(WHERE, max_retries=2)
    counted.failed(error=REFUSED)
    counted.failed(error=REFUSED)
    with pytest.raises(UnavailableError):
        counted.failed(error=REFUSED)
