"""CPU seconds by process: a cost per call that does not depend on how busy the machine is.

Latency on a shared 2-core machine moves with everyone else's load; the CPU a
call costs in each process (worker, dev server, API) barely does, and says
which process bounds throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    def per_call_ms(before: dict[str, float], after: dict[str, float], n: int) -> str:
        return ", ".join(
            f"{name} {1000 * (after[name] - before[name]) / max(n, 1):.1f}" for name in before
        )
