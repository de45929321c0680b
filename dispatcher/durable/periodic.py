"""One timing loop for the workers' background passes (the stuck-call sweep,
the orphan sweep, the open-call report): a pass every interval, none once
asked to stop; and one way to run such a loop for the duration of a block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any


async def ticks(interval: float, stop: asyncio.Event) -> AsyncIterator[None]:
    """Yield every `interval` seconds until `stop` is set; a stop ends the wait
    at once and no pass follows it."""
    while not stop.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        if stop.is_set():
            return
        yield


@contextlib.asynccontextmanager
async def in_background(name: str,
                        loop: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
                        ) -> AsyncIterator[None]:
    """Run `loop(stop)` as a task for the duration of the block; on the way out,
    set `stop` and wait for the loop to end its pass."""
    stop = asyncio.Event()
    task = asyncio.create_task(loop(stop), name=name)
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
