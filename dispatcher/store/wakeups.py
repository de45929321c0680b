"""In-process wake-ups for a call's final row.

A long-poll that waits for a call's result (the API's `?wait=`) would
otherwise learn of it from Temporal: the workflow's last task completes and
the history long-poll returns — one workflow task and one history round trip
after the row holding the result was committed. When the worker shares the
API's process and repository (`parkgate serve`), the write that commits the
final row wakes the waiters of that call at once. Nothing else depends on
it: in other processes nobody is woken and the long-poll waits for Temporal
as before. A wake-up is a hint; waiters re-read the row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class FinalRowWaiters:
    """Events of callers waiting for (session_id, tool_use_id)'s final row."""

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, str], set[tuple[asyncio.AbstractEventLoop,
                                                        asyncio.Event]]] = {}

    @contextmanager
    def watch(self, session_id: str, tool_use_id: str) -> Iterator[asyncio.Event]:
        """An event set when a final row of the call is committed in this process."""
        key = (session_id, tool_use_id)
        item = (asyncio.get_running_loop(), asyncio.Event())
        self._waiting.setdefault(key, set()).add(item)
        try:
            yield item[1]
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(item)
                if not waiters:
                    del self._waiting[key]

    def committed(self, session_id: str, tool_use_id: str) -> None:
        """A final row of the call was committed: wake its waiters (any loop)."""
        waiters = self._waiting.get((session_id, tool_use_id))
        if not waiters:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, event in list(waiters):
            if loop is running:
                event.set()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(event.set)
