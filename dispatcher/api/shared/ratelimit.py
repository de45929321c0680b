"""Per-key request rate limits (token buckets), so one runaway agent cannot
starve the others. In-process: each API process limits its own traffic."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class RateLimiter:
    """`rate` tokens per second up to `burst`; `rate` 0 disables limiting."""

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def check(self, key: str) -> float | None:
        """Take one token for `key`: None when allowed, else seconds to wait."""
        if self.rate <= 0:
            return None
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(tokens=float(self.burst), stamp=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / self.rate

    @staticmethod
    def retry_after(seconds: float) -> str:
        """The Retry-After header value (whole seconds, at least 1)."""
        return str(max(1, math.ceil(seconds)))
