"""CPU seconds by process: a cost per call that does not depend on how busy the machine is.

Latency on a shared 2-core machine moves with everyone else's load; the CPU a
call costs in each process (worker, dev server, API) barely does, and says
which process bounds throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import psutil


def _cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far; 0 when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times() if pid else None
    except psutil.Error:
        return 0.0
    return times.user + times.system if times else 0.0


@dataclass
class CpuMeter:
    """CPU seconds used by the worker, the dev server and this process (API + client)."""

    pids: dict[str, int | None]

    def read(self) -> dict[str, float]:
        return {name: _cpu_s(pid) for name, pid in self.pids.items()}

    @staticmethod
    def per_call(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
        """CPU ms per call by process between two readings, over `n` calls."""
        return {name: 1000 * (after[name] - before[name]) / max(n, 1) for name in before}

    @staticmethod
    def per_call_ms(before: dict[str, float], after: dict[str, float], n: int) -> str:
        """'this process 12.3, dev server 4.5': CPU ms per call by process."""
        return ms_by_process(CpuMeter.per_call(before, after, n))


#: Untimed pause after each measured call: its trailing work (the workflow's
#: close, the store's and the dev server's writes) ends there, not in the next.
SETTLE_S = 0.03


@dataclass
class SettledCpu:
    """CPU per call, by process, for calls measured one at a time between others.

    Each call is metered from its start to the end of an untimed settle
    (`SETTLE_S`) after it, so its trailing work is its own, less what the
    processes use when idle over that settle (`calibrate` measures the rate).
    """

    meter: CpuMeter
    idle_per_s: dict[str, float] = field(default_factory=dict)
    used_s: dict[str, dict[str, float]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    async def calibrate(self, seconds: float = 1.0) -> None:
        before = self.meter.read()
        await asyncio.sleep(seconds)
        after = self.meter.read()
        self.idle_per_s = {p: (after[p] - before[p]) / seconds for p in after}

    @contextlib.asynccontextmanager
    async def metered(self, name: str) -> AsyncIterator[None]:
        """Meter one call of `name` (the block), then settle."""
        before = self.meter.read()
        yield
        t0 = time.perf_counter()
        await asyncio.sleep(SETTLE_S)
        settled = time.perf_counter() - t0
        after = self.meter.read()
        used = self.used_s.setdefault(name, {})
        for proc in after:
            spent = after[proc] - before[proc] - self.idle_per_s.get(proc, 0.0) * settled
            used[proc] = used.get(proc, 0.0) + max(spent, 0.0)
        self.calls[name] = self.calls.get(name, 0) + 1

    def per_call_ms(self, name: str) -> dict[str, float]:
        n = max(self.calls.get(name, 0), 1)
        return {proc: 1000 * s / n for proc, s in self.used_s.get(name, {}).items()}

    def text(self, name: str) -> str:
        return cpu_text(self.per_call_ms(name))


def ms_by_process(per_call_ms: dict[str, float]) -> str:
    """'this process 12.3, dev server 4.5'."""
    return ", ".join(f"{proc} {ms:.1f}" for proc, ms in per_call_ms.items())


def cpu_text(per_call_ms: dict[str, float]) -> str:
    """'CPU ms/call: this process 12.3, dev server 4.5' for the rows' notes."""
    return "CPU ms/call: " + ms_by_process(per_call_ms)
