"""The serial floor a phase compares itself with: the latency phase's, or its own.

The latency phase's c=1 empty-workflow row is the run's floor when it ran
first; a phase run without it measures the same floor (eager start, one call
after another) on its own worker, so every ratio has a floor from its run.
"""

from __future__ import annotations

import time

from bench.approval import serial_floor_p50
from bench.floor import Empty, FloorWorkflow
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Stack


async def floor_p50(stack: Stack, task_queue: str, report: Report, ui: Reporter, *,
                    section: str, calls: int) -> float | None:
    """The latency phase's serial floor, else one measured here (a row in `section`).

    The worker serving `task_queue` must be running and register FloorWorkflow
    (`bench.stack.in_process_worker` does).
    """
    found = serial_floor_p50(report)
    if found is not None:
        return found

    async def floor(i: int) -> None:
        await stack.client.execute_workflow(
            FloorWorkflow.run, Empty(), id=f"bench/{stack.run}/{section}-floor/{i}",
            task_queue=task_queue, request_eager_start=True)

    for i in range(3):  # warm up on ids past the measured ones
        await floor(-1 - i)
    step = ui.step(f"{section}: floor", calls)
    samples: list[float] = []
    start = time.perf_counter()
    for i in range(calls):
        t0 = time.perf_counter()
        await floor(i)
        samples.append((time.perf_counter() - t0) * 1000)
        step.advance()
    row = report.add(Row.latency(section, "floor: empty workflow, eager start (this phase)",
                                 samples, concurrency=1, wall_s=time.perf_counter() - start))
    return row.p50_ms
