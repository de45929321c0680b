"""Heartbeats for an activity's whole run, stores writes included.

The execute activity runs with a heartbeat timeout so a dead worker is noticed
and its call reported "outcome unknown" instead of run again. The beat must
cover every store write too: a write waiting on a busy store past the timeout
would otherwise time out a run that is alive.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity


async def _beat() -> None:
    timeout = activity.info().heartbeat_timeout
    interval = max(0.2, min(5.0, timeout.total_seconds() / 4 if timeout else 5.0))
    while True:
        activity.heartbeat()
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def heartbeating(enabled: bool) -> AsyncIterator[None]:
    """Heartbeat (when `enabled`) until the block ends, however it ends."""
    beat = asyncio.create_task(_beat()) if enabled else None
    try:
        yield
    finally:
        if beat is not None:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
