"""Throughput phase: what a second worker process buys (issue 19, deliverable 3).

Auto-approved read_file calls through the real API (`POST .../tool-calls?wait=`
until the 200 with the result) from C concurrent agents, with the worker in
K separate `python -m parkgate.runtime.worker` processes (K = 1, 2 by default), and
the floor — an empty workflow started by a client, run by K
`python -m bench.floor_worker` processes — at the same C and K. Neither path
can start eagerly (no worker in the starting process), so the two are
comparable. Each row gives calls/s and the CPU each call cost in every
process (each worker, the dev server, this process: API + HTTP client), which
says what saturates.
"""

from __future__ import annotations

import os

from bench.cpu import CpuMeter
from bench.floor import Empty, FloorWorkflow
from bench.latency import Call, Load, run_load
from bench.parked import WorkerProcess
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Api, Stack, make_pipeline, serve_api

#: Issue 19: auto reads at 32 concurrent reach 0.8x the floor's calls/s.
TARGET_X_FLOOR = 0.8
HTTP_WAIT = 30


async def _measure(
    ui: Reporter, label: str, call: Call, calls: int, concurrency: int, meter: CpuMeter
) -> Load:
    # Warm up every worker process (imports, sandbox, connections) on ids past the measured ones.
    await run_load(lambda lane, i: call(lane, calls + i), max(3, 2 * concurrency),
                   concurrency, lambda: None)
    step = ui.step(label, calls)
    before = meter.read()
    load = await run_load(call, calls, concurrency, step.advance)
    load.cpu_ms = CpuMeter.per_call(before, meter.read(), calls)
    return load


def _meter(stack: Stack, workers: list[WorkerProcess]) -> CpuMeter:
    pids: dict[str, int | None] = {
        f"worker {i}": w.pid for i, w in enumerate(workers, 1)
    }
    pids["dev server"] = stack.server.process.pid if stack.server.process else None
    pids["API+bench client"] = os.getpid()
    return CpuMeter(pids)


def _start(stack: Stack, queue: str, k: int, module: str) -> list[WorkerProcess]:
    settings = stack.settings(queue)
    return [
        WorkerProcess(settings, stack.root / f"{queue}-{i}.log", module=module).start()
        for i in range(k)
    ]


def _stop(workers: list[WorkerProcess]) -> None:
    for w in workers:
        w.stop()


async def _reads(stack: Stack, ui: Reporter, k: int, calls: int, c: int) -> Load:
    queue = stack.task_queue(f"tput-read-w{k}")
    workers = _start(stack, queue, k, "parkgate.runtime.worker")
    settings = stack.settings(queue)
    registry = make_pipeline(settings).registry
    registered: set[str] = set()
    try:
        async with serve_api(stack, settings, registry, connections=c + 4) as api:

            async def call(lane: int, i: int) -> object:
                return await _read(api, stack, registered, f"tput-{stack.run}-w{k}-{lane}", i)

            return await _measure(ui, f"throughput: http read_file, {k} worker process(es)",
                                  call, calls, c, _meter(stack, workers))
    finally:
        _stop(workers)


async def _read(api: Api, stack: Stack, registered: set[str], sid: str, i: int) -> object:
    if sid not in registered:
        await api.register(sid, stack.workspace)
        registered.add(sid)
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/t/tool-calls",
        params={"wait": HTTP_WAIT},
        json={"id": f"r{i}", "name": "read_file", "input": {"path": "README.md"}},
    )
    body = r.json()
    if r.status_code != 200 or body.get("status") != "succeeded":
        raise RuntimeError(f"benchmark call failed: {r.status_code} {r.text[:300]}")
    return body


async def _floor(stack: Stack, ui: Reporter, k: int, calls: int, c: int) -> Load:
    queue = stack.task_queue(f"tput-floor-w{k}")
    workers = _start(stack, queue, k, "bench.floor_worker")
    try:

        async def call(lane: int, i: int) -> object:
            return await stack.client.execute_workflow(
                FloorWorkflow.run, Empty(), id=f"bench/{stack.run}/tput-floor/w{k}/{i}",
                task_queue=queue,
            )

        return await _measure(ui, f"throughput: floor, {k} worker process(es)", call, calls, c,
                              _meter(stack, workers))
    finally:
        _stop(workers)


async def run(
    stack: Stack,
    report: Report,
    ui: Reporter,
    *,
    workers: list[int],
    concurrency: int,
    calls: int,
) -> None:
    total = max(calls, 2 * concurrency)
    for k in workers:
        floor = await _floor(stack, ui, k, total, concurrency)
        reads = await _reads(stack, ui, k, total, concurrency)
        _rows(report, k, concurrency, floor, reads)


def _rows(report: Report, k: int, c: int, floor: Load, reads: Load) -> None:
    procs = f"{k} worker process{'es' if k > 1 else ''}"
    f = report.add(Row.latency("throughput", f"floor: empty workflow, client start, {procs}",
                               floor.samples_ms, concurrency=c, wall_s=floor.wall_s,
                               note=floor.cpu))
    r = report.add(Row.latency("throughput", f"http read_file (POST ?wait= → 200), {procs}",
                               reads.samples_ms, concurrency=c, wall_s=reads.wall_s,
                               note=reads.cpu))
    if f.p50_ms and r.p50_ms:
        r.x_floor = r.p50_ms / f.p50_ms
    ratio = (r.per_s or 0) / f.per_s if f.per_s else 0.0
    report.add(Row("throughput", f"read calls/s ÷ floor calls/s, {procs}", concurrency=c,
                   value=round(ratio, 2), unit="x", target=f"≥ {TARGET_X_FLOOR:g}x",
                   met=ratio >= TARGET_X_FLOOR))


