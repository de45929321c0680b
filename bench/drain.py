"""Drain phase: the parked phase's drain rate with 1, 2, 3 worker processes (issue 19, #5).

For each K: K `python -m parkgate.runtime.worker` processes on one fresh task queue
(the main queue, no worker groups), the API in this process (no worker here).
N writes under approve/ are submitted over HTTP and park, spread over the K
workers; then every call is approved over HTTP, C at a time, and the drain
rate is N over the time from the first decision to the last call `succeeded`
in the history store. The same integrity checks as the parked phase (lost,
ran twice: events, files and the execute attempts in the Temporal histories)
run on every K.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from bench.cpu import CpuMeter, cpu_text
from bench.parked import (
    DRAIN_TARGET_PER_S,
    Retries,
    WorkerProcess,
    _approve,
    _submit,
    _wait_count,
    verify,
)
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Api, Stack, bounded, make_pipeline, serve_api
from parkgate.calls.records import CallStatus
from parkgate.store.results import CallFilters


async def run(
    stack: Stack,
    report: Report,
    ui: Reporter,
    *,
    workers: list[int],
    calls: int,
    concurrency: int,
) -> None:
    for k in workers:
        await _drain(stack, report, ui, k, calls, concurrency)


async def _drain(
    stack: Stack, report: Report, ui: Reporter, k: int, calls: int, concurrency: int
) -> None:
    queue = stack.task_queue(f"drain-w{k}")
    settings = stack.settings(queue)
    registry = make_pipeline(settings).registry
    procs = [WorkerProcess(settings, stack.root / f"{queue}-{i}.log").start() for i in range(k)]
    sid = f"drain-{stack.run}-w{k}"
    ids = [f"d{i:05d}" for i in range(calls)]
    try:
        async with serve_api(stack, settings, registry, connections=concurrency + 4) as api:
            await api.register(sid, stack.workspace)
            # Warm-up in a session of its own: a few calls through the whole path, so every
            # worker has its imports before the measured ones.
            wsid = f"{sid}-warm"
            await api.register(wsid, stack.workspace)
            warm = [f"warm{i}" for i in range(2 * k)]
            await bounded(warm, len(warm), lambda cid: _submit(api, wsid, cid, Retries()))
            await _wait_count(stack, wsid, CallStatus.PARKED, len(warm), 120, lambda n: None,
                              "parked (warm-up)")
            await _approve_all(stack, api, wsid, len(warm), Retries())
            await _wait_count(stack, wsid, CallStatus.SUCCEEDED, len(warm), 120, lambda n: None,
                              "finished (warm-up)")

            submits = ui.step(f"drain, {k} workers: park {calls}", calls)
            retries = Retries()

            async def submit(cid: str) -> float:
                ms = await _submit(api, sid, cid, retries)
                submits.advance()
                return ms

            await bounded(ids, concurrency, submit)
            await _wait_count(stack, sid, CallStatus.PARKED, calls, 300 + calls * 0.5,
                              lambda n: None, "parked")
            meter = CpuMeter({
                **{f"worker {i}": p.pid
                   for i, p in enumerate(procs, 1)},
                "dev server": stack.server.process.pid if stack.server.process else None,
                "API+bench client": os.getpid(),
            })
            step = ui.step(f"drain, {k} workers: drained (of {calls})", calls)
            before = meter.read()
            t0 = time.perf_counter()
            approvals = await _approve_all(stack, api, sid, concurrency, retries, step.advance)
            t1 = await _wait_count(stack, sid, CallStatus.SUCCEEDED, calls,
                                   300 + calls * 0.5, lambda n: None, "finished", interval=0.05)
            after = meter.read()
    finally:
        for p in procs:
            p.stop()
    lost, doubled, problems = await verify(stack, sid, ids, ui)
    plural = "es" if k > 1 else ""
    row = Row.latency("drain", f"drain with {k} worker process{plural}: approve all via POST "
                      "confirmations → succeeded", approvals, concurrency=concurrency,
                      wall_s=t1 - t0,
                      note=f"per s = drain rate; {retries.count} retries; "
                           + cpu_text(CpuMeter.per_call(before, after, calls)))
    row.target = f"≥ {DRAIN_TARGET_PER_S:g} calls/s"
    row.met = (row.per_s or 0) >= DRAIN_TARGET_PER_S
    report.add(row)
    report.add(Row("drain", f"lost or ran twice, {k} worker process{plural}",
                   value=lost + doubled, unit="calls", n=calls, target="0",
                   met=lost + doubled == 0))
    for problem in problems[:20]:
        report.errors.append(f"drain ({k} workers): {problem}")


async def _approve_all(
    stack: Stack, api: Api, sid: str, concurrency: int, retries: Retries,
    advance: Callable[[], None] | None = None,
) -> list[float]:
    """Approve every parked call of the session, `concurrency` at a time; decision POST ms."""
    requests: list[str] = []
    async for batch in stack.store.iter_calls(
        CallFilters(session_id=sid, status=CallStatus.PARKED)
    ):
        requests += [row.request_id for row in batch if row.request_id]

    async def approve(request_id: str) -> float:
        ms = await _approve(api, sid, request_id, retries)
        if advance is not None:
            advance()
        return ms

    return await bounded(requests, concurrency, approve)
