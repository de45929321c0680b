"""One timing loop for the workers' background passes (the stuck-call sweep,
the open-call report): a pass every interval, none once asked to stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


async def ticks(interval: float, stop: asyncio.Event) -> AsyncIterator[None]:
    """Yield every `interval` seconds until `stop` is set; a stop ends the wait
    at once and no pass follows it."""
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        if stop.is_set():
            return
        yield
