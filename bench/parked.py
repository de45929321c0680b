"""Phase 3: parked capacity and drain.

One worker (`python -m parkgate.runtime.worker`, the production entry point) runs in
its own process; the API runs in this one (no worker here, so every workflow
task goes to that process). N writes under approve/ are submitted through
`POST /v1/.../tool-calls` and park. The worker's RSS is read with psutil after
a warm-up call has gone through the whole path (baseline) and again with all
N parked. Then every call is approved through
`POST /v1/.../confirmations/{request_id}` and the drain rate is the number of
calls over the time from the first decision to the last call finished in the
history store.

Integrity, checked afterwards:
- lost: a submitted call without a `succeeded` row, a missing event, or a
  missing/wrong file in the workspace;
- ran twice: a call with more than one tool.called/tool.completed event, or
  whose workflow history started the at-most-once execute activity more than
  once (event ids are deterministic, so the Temporal history is the witness
  that cannot be deduplicated away);
- the history's hash chain verifies.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from temporalio.api.enums.v1 import EventType

from bench.approval import wait_parked
from bench.cpu import CpuMeter
from bench.progress import Reporter
from bench.report import Report, Row
from bench.stack import Api, Stack, bounded, make_pipeline, serve_api
from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import ACT_EXECUTE, call_workflow_id
from parkgate.runtime.worker_process import WorkerProcess
from parkgate.store.results import CallFilters, CallRecord

REPO_ROOT = Path(__file__).resolve().parent.parent
MB = 2**20
RSS_GROWTH_LIMIT_MB = 200.0
DRAIN_TARGET_PER_S = 20.0
EXPECTED_EVENTS = (
    "tool.confirmation_requested",
    "tool.confirmation_resolved",
    "tool.called",
    "tool.completed",
)


def worker_rss_mb(worker: WorkerProcess) -> float:
    """The worker process's resident memory in MB."""
    if not worker.running:
        raise RuntimeError(f"the worker process is not running; see {worker.log_path}")
    return float(psutil.Process(worker.pid).memory_info().rss / MB)


def _rss_mb(pid: int | None) -> float | None:
    try:
        return psutil.Process(pid).memory_info().rss / MB if pid else None
    except psutil.Error:
        return None


async def _count(stack: Stack, sid: str, status: CallStatus | list[CallStatus]) -> int:
    return await stack.store.count_calls(CallFilters(session_id=sid, status=status))


async def _wait_count(
    stack: Stack,
    sid: str,
    status: CallStatus | list[CallStatus],
    n: int,
    timeout: float,
    advance: Callable[[int], None],
    what: str,
    interval: float = 0.1,
) -> float:
    """Poll the store until `n` calls of the session are in `status`; returns when."""
    deadline = time.monotonic() + timeout
    while True:
        count = await _count(stack, sid, status)
        advance(count)
        if count >= n:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {count}/{n} calls {what} after {timeout:.0f}s")
        await asyncio.sleep(interval)


#: An agent retries a submission or decision that failed in transit (5xx, timeout):
#: resubmitting a tool_use_id attaches to the same call, and a repeated decision
#: is answered 409 with the standing one. Retries are counted and reported.
ATTEMPTS = 3


@dataclass
class Retries:
    count: int = 0


async def _post(api: Api, url: str, body: dict[str, object], ok: Callable[[httpx.Response], bool],
                retries: Retries, *, client: httpx.AsyncClient | None = None) -> float:
    """POST with an agent's retry; returns the latency of the attempt that succeeded (ms)."""
    for attempt in range(ATTEMPTS):
        t0 = time.perf_counter()
        try:
            r = await (client or api.http).post(url, json=body)
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if ok(r):
                return (time.perf_counter() - t0) * 1000
            problem = f"{r.status_code} {r.text[:300]}"
            if r.status_code < 500:
                break
        if attempt + 1 < ATTEMPTS:
            retries.count += 1
            await asyncio.sleep(0.5 * (attempt + 1))
    raise RuntimeError(f"POST {url} failed: {problem}")


async def _submit(api: Api, sid: str, cid: str, retries: Retries) -> float:
    return await _post(
        api,
        f"/v1/sessions/{sid}/turns/t/tool-calls",
        {"id": cid, "name": "write_file",
         "input": {"path": f"approve/{sid}/{cid}.txt", "content": f"{cid}\n"}},
        lambda r: r.status_code in (200, 202),
        retries,
    )


def _decided_by_us(r: httpx.Response) -> bool:
    """200, or a 409 whose standing decision is ours (an earlier attempt got through)."""
    if r.status_code == 200:
        return True
    if r.status_code != 409:
        return False
    winner = r.json().get("error", {}).get("details", {}).get("winner") or {}
    return bool(winner.get("decision") == "allow"
                and str(winner.get("decided_by", "")).startswith("bench-approver-"))


async def _approve(api: Api, sid: str, request_id: str, retries: Retries) -> float:
    return await _post(
        api,
        f"/v1/sessions/{sid}/turns/t/confirmations/{request_id}",
        {"decision": "allow", "decided_by": "bench"},
        _decided_by_us,
        retries,
        client=api.approver,
    )


async def run(
    stack: Stack,
    report: Report,
    ui: Reporter,
    *,
    parked: int,
    concurrency: int,
    max_cached_workflows: int | None = None,
) -> None:
    overrides = {} if max_cached_workflows is None else {
        "max_cached_workflows": max_cached_workflows
    }
    settings = stack.settings(stack.task_queue("parked"), **overrides)
    registry = make_pipeline(settings).registry
    worker = WorkerProcess(settings, stack.root / "worker.log").start()
    sid = f"parked-{stack.run}"
    ids = [f"p{i:05d}" for i in range(parked)]
    try:
        async with serve_api(stack, settings, registry, connections=concurrency + 4) as api:
            await api.register(sid, stack.workspace)
            # Warm-up: one call through the whole path, so the baseline has every import.
            await _submit(api, sid, "warm", Retries())
            body = await wait_parked(api, sid, "warm", timeout=120)
            await _approve(api, sid, body["request_id"], Retries())
            done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/warm",
                                      params={"wait": 60})
            if done.status_code != 200:
                raise RuntimeError(f"warm-up call did not finish: {done.text}")
            await asyncio.sleep(1.0)
            rss_before = worker_rss_mb(worker)
            server_pid = stack.server.process.pid if stack.server.process else None
            server_before = _rss_mb(server_pid)

            cpu = CpuMeter({
                "worker": worker.pid,
                "dev server": server_pid,
                "API+bench client": os.getpid(),
            })
            cpu_start = cpu.read()
            submit_step = ui.step(f"submit {parked} calls", parked)
            park_step = ui.step(f"parked (of {parked})", parked)
            submit_retries, approve_retries = Retries(), Retries()
            t_submit = time.perf_counter()

            async def submit(cid: str) -> float:
                ms = await _submit(api, sid, cid, submit_retries)
                submit_step.advance()
                return ms

            submits = await bounded(ids, concurrency, submit)
            t_parked = await _wait_count(
                stack, sid, CallStatus.PARKED, parked, 300 + parked * 0.5,
                park_step.update, "parked",
            )
            cpu_parked = cpu.read()
            await asyncio.sleep(2.0)
            rss_parked = worker_rss_mb(worker)
            server_parked = _rss_mb(server_pid)

            requests: dict[str, str] = {}
            async for batch in stack.store.iter_calls(
                CallFilters(session_id=sid, status=CallStatus.PARKED)
            ):
                for row in batch:
                    if row.request_id:
                        requests[row.tool_use_id] = row.request_id
            if len(requests) != parked:
                raise RuntimeError(f"{len(requests)} parked calls have a request id, not {parked}")

            approve_step = ui.step(f"approve {parked} via POST", parked)
            drain_step = ui.step(f"drained (of {parked})", parked)
            cpu_drain = cpu.read()
            t_drain = time.perf_counter()

            async def approve(cid: str) -> float:
                ms = await _approve(api, sid, requests[cid], approve_retries)
                approve_step.advance()
                return ms

            # +1: the warm-up call is in the session too (it succeeded before).
            waiter = asyncio.create_task(
                _wait_count(stack, sid, CallStatus.SUCCEEDED, parked + 1, 300 + parked * 0.5,
                            lambda n: drain_step.update(n - 1), "finished", interval=0.05)
            )
            approvals = await bounded(ids, concurrency, approve)
            t_drained = await waiter
            cpu_drained = cpu.read()
            rss_drained = worker_rss_mb(worker)
    finally:
        worker.stop()

    lost, doubled, problems = await verify(stack, sid, ids, ui)
    chain = await stack.store.verify_chain(sid)

    park_s = t_parked - t_submit
    report.add(Row.latency("parked", f"submit {parked} writes (POST tool-calls → parked)",
                           submits, concurrency=concurrency, wall_s=park_s,
                           note=f"per s = parked per second; {submit_retries.count} retries"))
    report.add(Row("parked", "CPU ms per call to park, by process",
                   note=CpuMeter.per_call_ms(cpu_start, cpu_parked, parked)))
    report.add(Row("parked", "worker RSS after warm-up (baseline)", value=round(rss_before, 1),
                   unit="MB"))
    report.add(Row("parked", f"worker RSS with {parked} parked", value=round(rss_parked, 1),
                   unit="MB", n=parked))
    growth = rss_parked - rss_before
    report.add(Row("parked", f"worker RSS growth for {parked} parked", value=round(growth, 1),
                   unit="MB", n=parked, target=f"< {RSS_GROWTH_LIMIT_MB:g} MB",
                   met=growth < RSS_GROWTH_LIMIT_MB,
                   note=f"max_cached_workflows={settings.max_cached_workflows}"))
    report.add(Row("parked", "worker RSS after drain", value=round(rss_drained, 1), unit="MB"))
    if server_before is not None and server_parked is not None:
        report.add(Row("parked", f"dev server RSS growth for {parked} parked",
                       value=round(server_parked - server_before, 1), unit="MB", n=parked))
    drain = Row.latency("parked", "drain: approve all via POST confirmations → succeeded",
                        approvals, concurrency=concurrency, wall_s=t_drained - t_drain,
                        note=f"per s = drain rate; latencies = decision POST; "
                             f"{approve_retries.count} retries")
    drain.target = f"≥ {DRAIN_TARGET_PER_S:g} calls/s"
    drain.met = (drain.per_s or 0) >= DRAIN_TARGET_PER_S
    report.add(drain)
    report.add(Row("parked", "CPU ms per call to drain, by process",
                   note=CpuMeter.per_call_ms(cpu_drain, cpu_drained, parked)))
    report.add(Row("parked", "lost (no result, event or file)", value=lost, unit="calls",
                   n=parked, target="0", met=lost == 0))
    report.add(Row("parked", "ran twice (events or execute attempts)", value=doubled,
                   unit="calls", n=parked, target="0", met=doubled == 0))
    report.add(Row("parked", "history hash chain verifies", value=1 if chain.ok else 0,
                   target="1", met=chain.ok))
    for problem in problems[:20]:
        report.errors.append(f"parked: {problem}")


async def verify(
    stack: Stack, sid: str, ids: list[str], ui: Reporter
) -> tuple[int, int, list[str]]:
    """(lost, ran twice, problems) of the session's calls, from the store, files and Temporal."""
    store = stack.store
    rows: dict[str, CallRecord] = {}
    async for batch in store.iter_calls(CallFilters(session_id=sid)):
        for row in batch:
            rows[row.tool_use_id] = row
    events = await store.events_for_calls([(sid, cid) for cid in ids])
    lost: set[str] = set()
    doubled: set[str] = set()
    problems: list[str] = []
    extra = set(rows) - set(ids) - {"warm"}
    if extra:
        problems.append(f"{len(extra)} calls in the store that were never submitted")
    for cid in ids:
        found = rows.get(cid)
        if found is None or found.status != CallStatus.SUCCEEDED:
            lost.add(cid)
            problems.append(f"{cid}: status {found.status if found else 'missing'}")
            continue
        kinds = Counter(e.type for e in events[(sid, cid)])
        if any(kinds[k] == 0 for k in EXPECTED_EVENTS):
            lost.add(cid)
            problems.append(f"{cid}: events {dict(kinds)}")
        if kinds["tool.called"] > 1 or kinds["tool.completed"] > 1:
            doubled.add(cid)
            problems.append(f"{cid}: events {dict(kinds)}")
        path = stack.workspace / "approve" / sid / f"{cid}.txt"
        if not path.exists() or path.read_text() != f"{cid}\n":
            lost.add(cid)
            problems.append(f"{cid}: file missing or wrong")

    step = ui.step("check execute attempts in Temporal histories", len(ids))

    async def attempts(cid: str) -> int:
        handle = stack.client.get_workflow_handle(call_workflow_id(sid, cid))
        history = await handle.fetch_history()
        scheduled: set[int] = set()
        started = 0
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == ACT_EXECUTE:
                    scheduled.add(event.event_id)
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attrs_s = event.activity_task_started_event_attributes
                if attrs_s.scheduled_event_id in scheduled:
                    started += max(1, attrs_s.attempt)
        step.advance()
        return started

    counts = await bounded(ids, 16, attempts)
    for cid, n in zip(ids, counts, strict=True):
        if n > 1:
            doubled.add(cid)
            problems.append(f"{cid}: execute activity started {n} times")
        elif n == 0 and cid not in lost:
            lost.add(cid)
            problems.append(f"{cid}: execute activity never started")
    return len(lost), len(doubled), problems
