"""The serial floor a phase compares itself with, measured beside its own calls.

A phase that runs one call at a time (approval, client, claude_code) times
one empty workflow (eager start, the phase's own worker) after each of its
calls, each settled first (`bench.cpu.SETTLE_S`) so that neither carries the
other's trailing work. A shared machine drifts over the minute a phase
takes; a floor measured in another phase, half a minute earlier or later,
moved the ratios by a third. The floor's row is added to the phase's section.

`floor_p50` (the scale phase's): the latency phase's c=1 floor when it ran
first, else the same floor measured here, one call after another.
"""

from __future__ import annotations

import asyncio
import time

from bench.cpu import SETTLE_S
from bench.floor import Empty, FloorWorkflow
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Stack


def serial_floor_p50(report: Report) -> float | None:
    """The c=1 floor of this run's latency phase, if it ran before this phase."""
    for row in report.rows:
        if row.section == "latency" and row.name.startswith("floor") and row.concurrency == 1:
            return row.p50_ms
    return None


#: The name of a paired floor's row.
PAIRED_FLOOR_ROW = "floor: empty workflow, eager start (one after each call of this phase)"


class PairedFloor:
    """One floor call after each of a phase's calls (`one`), or back to back
    (`timed`, `floor_p50`); the worker serving `task_queue` must register
    FloorWorkflow, as `bench.stack.in_process_worker` does."""

    def __init__(self, stack: Stack, task_queue: str, section: str) -> None:
        self.stack, self.task_queue, self.section = stack, task_queue, section
        self.samples: list[float] = []
        self._n = 0

    async def _call(self, tag: str) -> None:
        self._n += 1
        await self.stack.client.execute_workflow(
            FloorWorkflow.run, Empty(),
            id=f"bench/{self.stack.run}/{self.section}-floor/{tag}-{self._n}",
            task_queue=self.task_queue, request_eager_start=True)

    async def warm_up(self) -> None:
        for _ in range(3):
            await self._call("warm")

    async def timed(self) -> None:
        """Time one floor call (a sample)."""
        t0 = time.perf_counter()
        await self._call("call")
        self.samples.append((time.perf_counter() - t0) * 1000)

    async def one(self) -> None:
        """Settle, time one floor call, settle again."""
        await asyncio.sleep(SETTLE_S)
        await self.timed()
        await asyncio.sleep(SETTLE_S)

    def add_row(self, report: Report) -> float | None:
        """The floor's row in this phase's section; its p50."""
        if not self.samples:
            return None
        row = report.add(Row.latency(self.section, PAIRED_FLOOR_ROW, self.samples,
                                     concurrency=1))
        return row.p50_ms


async def floor_p50(stack: Stack, task_queue: str, report: Report, ui: Reporter, *,
                    section: str, calls: int) -> float | None:
    """The latency phase's serial floor, else one measured here (a row in `section`).

    The worker serving `task_queue` must be running and register FloorWorkflow
    (`bench.stack.in_process_worker` does).
    """
    found = serial_floor_p50(report)
    if found is not None:
        return found

    floor = PairedFloor(stack, task_queue, section)
    await floor.warm_up()
    step = ui.step(f"{section}: floor", calls)
    start = time.perf_counter()
    for _ in range(calls):
        await floor.timed()
        step.advance()
    row = report.add(Row.latency(section, "floor: empty workflow, eager start (this phase)",
                                 floor.samples, concurrency=1,
                                 wall_s=time.perf_counter() - start))
    return row.p50_ms
