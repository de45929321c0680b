"""The periodic report of calls open too long (issue 37: every wait has an end
or a reason not to).

A call parked with `approval_expiry_seconds: 0`, one whose client holds a long
lease, or one stuck behind a broken worker stays open; the
`parkgate_calls_open_too_long` gauge counts them when something scrapes it.
This loop says it where an operator without a metrics stack looks: one WARNING
every `open_call_report_interval_seconds` naming the oldest of them, for as
long as any call has been open longer than `open_call_report_seconds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from parkgate.calls.records import LIVE_STATUSES
from parkgate.durable.periodic import in_background, ticks
from parkgate.settings import Settings
from parkgate.store.results import CallFilters

log = logging.getLogger("parkgate.open_calls")

#: Calls named in one report line (the rest are counted).
NAMED = 5


class CallLister(Protocol):
    async def list_calls(self, filters: CallFilters | None = None, limit: int = 50) -> Any: ...


def _age(seconds: float) -> str:
    """A rounded age: `3d4h`, `5h12m`, `7m`."""
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{mins}m"
    return f"{mins}m"


def describe(calls: Sequence[Any], more: bool, threshold: float, now: datetime) -> str:
    """The report line: how many, the oldest few, and the command that lists them."""
    named = sorted(calls, key=lambda c: c.created_at)[:NAMED]
    parts = []
    for call in named:
        created = call.created_at if call.created_at.tzinfo else \
            call.created_at.replace(tzinfo=UTC)
        parts.append(f"{call.session_id}/{call.tool_use_id} ({call.tool_name}, "
                     f"{call.status.value}, open {_age((now - created).total_seconds())})")
    count = f"{len(calls)}{'+' if more else ''}"
    return (f"{count} call(s) open longer than {_age(threshold)}: {'; '.join(parts)}"
            f"{' ...' if len(calls) > NAMED or more else ''} "
            f"(parkgate calls list --open-longer-than {int(threshold)})")


async def report_once(store: CallLister, threshold: float, *, limit: int = 100) -> str | None:
    """One pass: the report line, logged as a WARNING, or None when no call is
    open longer than `threshold` seconds."""
    now = datetime.now(UTC)
    filters = CallFilters(status=list(LIVE_STATUSES),
                          until=now - timedelta(seconds=threshold))
    page = await store.list_calls(filters, limit=limit)
    if not page.items:
        return None
    line = describe(page.items, bool(getattr(page, "next_cursor", None)), threshold, now)
    log.warning("%s", line)
    return line


async def _loop(store: CallLister, settings: Settings, stop: asyncio.Event) -> None:
    interval = settings.open_call_report_interval_seconds
    async for _ in ticks(interval, stop):
        try:
            await report_once(store, settings.open_call_report_seconds)
        except Exception:  # the store may be down: the next pass tries again
            log.warning("could not read open calls; retrying in %.0f s", interval,
                        exc_info=True)


@contextlib.asynccontextmanager
async def reporting_open_calls(settings: Settings, store: object) -> AsyncIterator[None]:
    """Report open calls for the duration of the block (off when the interval is
    0 or the store cannot list calls)."""
    if settings.open_call_report_interval_seconds <= 0 or not hasattr(store, "list_calls"):
        yield None
        return
    async with in_background("parkgate-open-calls",
                             lambda stop: _loop(store, settings, stop)):  # type: ignore[arg-type]
        yield None
