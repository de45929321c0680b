"""bench.cpu.SettledCpu: a call's CPU is its own, trailing work included, idle excluded."""

from __future__ import annotations

import asyncio
import os
import time

from bench.cpu import SETTLE_S, CpuMeter, SettledCpu


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def test_a_call_is_charged_its_work_and_its_trailing_work() -> None:
    cpu = SettledCpu(CpuMeter({"this process": os.getpid()}))
    await cpu.calibrate(0.2)
    loop = asyncio.get_running_loop()
    for _ in range(3):
        async with cpu.metered("busy"):
            _spin(0.02)
            # Work the call leaves behind, done during the settle: still its own.
            loop.call_later(SETTLE_S / 3, _spin, 0.01)
        async with cpu.metered("idle"):
            await asyncio.sleep(0.001)
    busy = cpu.per_call_ms("busy")["this process"]
    idle = cpu.per_call_ms("idle")["this process"]
    assert 25 <= busy <= 60, busy  # 20 ms in the call + 10 ms after it
    assert idle < 10, idle
    assert cpu.calls == {"busy": 3, "idle": 3}
    assert cpu.text("busy").startswith("CPU ms/call: this process ")
