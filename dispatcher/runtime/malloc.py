"""Fewer glibc malloc arenas for the long-running processes (worker, `parkgate api`).

glibc gives threads their own malloc arenas (up to 8 per core); the Temporal
SDK's core, aiosqlite's connection threads and the event loop then each keep
freed memory in their own arena, so resident memory grows with the threads
rather than with what is live. Two arenas measured ~14 MB less for a worker
and an API holding 1,000 parked calls (docs/PERFORMANCE.md, "Scale on one
machine"); the worker and the API are mostly one event loop, so the lock
contention more arenas would avoid is small. An operator's own
MALLOC_ARENA_MAX wins; other C libraries are left alone.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: mallopt's parameter number for the arena limit (glibc's malloc.h).
M_ARENA_MAX = -8
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap the arenas (call before threads start); whether it was applied."""
    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt arenas)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
