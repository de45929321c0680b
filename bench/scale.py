"""Phase `scale`: N parked calls on one machine, held by one worker process and
one API process (issue 27, "Scale on one machine").

Both run as `parkgate` runs them in production: the worker is `python -m
parkgate.runtime.worker` and the API is `parkgate api` (the CLI's
`run_api`), each its own process configured only by PARKGATE_* variables,
sharing the run's dev server and history store. After a warm-up call has gone
through the whole path, both processes' RSS is the baseline; N writes under
approve/ are submitted over HTTP (C at a time) and park. With all N parked:

- the approver's inbox (`GET /inbox`, an approver key signed in with the
  form, as a person does) and the audit call list (`GET /v1/tool-calls`,
  newest first, one session's parked calls and all sessions) are each asked
  `requests` times, one after another: p50/p95 against p95 < 200 ms;
- before all that, each process at rest (`bench.at_rest`: started, up, nothing
  served): its RSS and the modules it imported, the API's against < 100 MB;
- the worker's and the API's RSS again (after those requests), and their sum
  against < 400 MB; the dev server's RSS is reported beside it (not in the
  target: it is Temporal's, and a production deployment runs its own).

The serial floor (empty workflow, eager start, one after another) is the
latency phase's when it ran first in the same run, else measured here
(`bench.serial_floor`, row `floor: ... (this phase)`); the timed rows carry
their p50 over it. The drain after a mass approval is the parked and drain
phases' (`--phases parked,drain`); this phase leaves its calls parked.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import psutil

from bench import at_rest
from bench.approval import wait_parked
from bench.parked import Retries, _approve, _submit, _wait_count
from bench.progress import Reporter
from bench.report import Report, Row
from bench.serial_floor import floor_p50 as run_floor_p50
from bench.stack import Api, Stack, bounded, in_process_worker
from parkgate.calls.records import CallStatus
from parkgate.runtime.ports import LOCALHOST, free_port, wait_port_async
from parkgate.runtime.process import ManagedProcess
from parkgate.runtime.worker_process import WorkerProcess, settings_env
from parkgate.settings import Settings

MB = 2**20
#: Targets of issue 27 at N = 10,000 (reported at every N).
RSS_SUM_LIMIT_MB = 400.0
P95_LIMIT_MS = 200.0
#: `parkgate api` as the CLI runs it (the one `run_api`).
API_ARGV = [sys.executable, "-c", "from parkgate.cli import main; main()", "api"]
INBOX_ROW = "GET /inbox (approver signed in; first page)"
LIST_SESSION_ROW = "GET /v1/tool-calls?session_id=…&status=parked (audit list, first page)"
LIST_ALL_ROW = "GET /v1/tool-calls (audit list, all sessions, first page)"
SUM_ROW = "worker + API RSS with {n} parked"


def rss_mb(pid: int | None) -> float:
    """A live process's resident memory in MB."""
    if pid is None:
        raise RuntimeError("no process to measure")
    return float(psutil.Process(pid).memory_info().rss / MB)


def pss_mb(pid: int | None) -> float | None:
    """Its proportional set size in MB (shared pages split among their users), where
    the system tells it: RSS counts the pages the worker and the API share twice."""
    try:
        return float(psutil.Process(pid).memory_full_info().pss / MB)
    except (AttributeError, psutil.Error):
        return None


@contextlib.asynccontextmanager
async def api_process(
    stack: Stack, settings: Settings, *, connections: int
) -> AsyncIterator[tuple[Api, ManagedProcess, httpx.AsyncClient]]:
    """`parkgate api` in its own process on a free port, with the bench's clients:
    the agent's key, an approver (+ auditor) key, and a browser signed in to the inbox."""
    port = free_port(LOCALHOST)
    base = f"http://{LOCALHOST}:{port}"
    settings = settings.model_copy(update={"public_base_url": base})
    proc = ManagedProcess(
        "scale-api", [*API_ARGV, "--host", LOCALHOST, "--port", str(port),
                      "--log-level", "warning"],
        log_path=stack.root / "scale-api.log", env=settings_env(settings), cwd=stack.root,
    ).start()
    try:
        await _wait_healthy(proc, base)
        key, _ = await stack.store.create_api_key(f"bench-{uuid.uuid4().hex[:8]}")
        approver_key, _ = await stack.store.create_api_key(
            f"bench-approver-{uuid.uuid4().hex[:8]}", roles=("approver", "auditor"))
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        timeout = httpx.Timeout(120.0)
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=timeout,
            limits=limits,
        ) as http, httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {approver_key}"},
            timeout=timeout, limits=limits,
        ) as approver, httpx.AsyncClient(base_url=base, timeout=timeout) as browser:
            await sign_in(browser, approver_key)
            yield Api(base, http, key, approver), proc, browser
    finally:
        await proc.astop()


async def _wait_healthy(proc: ManagedProcess, base: str, timeout: float = 120.0) -> None:
    port = int(base.rsplit(":", 1)[1])
    try:
        await wait_port_async(port, timeout)
    except TimeoutError:
        proc.assert_alive()
        raise
    async with httpx.AsyncClient(base_url=base, timeout=5) as client:
        deadline = time.monotonic() + timeout
        while True:
            proc.assert_alive()
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/healthz")).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the API process is not healthy after {timeout:.0f}s")
            await asyncio.sleep(0.2)


async def sign_in(browser: httpx.AsyncClient, key: str) -> None:
    """Sign in to the inbox with an approver key (the form a person uses): a cookie."""
    page = await browser.get("/inbox/login")
    match = re.search(r'name="csrf" value="([^"]+)"', page.text)
    if match is None:
        raise RuntimeError(f"no sign-in form at /inbox/login: {page.status_code}")
    r = await browser.post("/inbox/login", data={
        "csrf": html.unescape(match.group(1)), "api_key": key, "next": "/inbox"})
    if r.status_code != 303 or "pg_inbox" not in browser.cookies:
        raise RuntimeError(f"inbox sign-in refused: {r.status_code} {r.text[:300]}")


async def timed(
    ui: Reporter, label: str, requests: int, get: Callable[[], Awaitable[httpx.Response]],
    check: Callable[[httpx.Response], str | None],
) -> list[float]:
    """`requests` sequential GETs (after 3 unmeasured ones); ms each; each answer checked."""
    step = ui.step(label, requests)
    samples: list[float] = []
    for i in range(requests + 3):
        t0 = time.perf_counter()
        r = await get()
        ms = (time.perf_counter() - t0) * 1000
        problem = check(r)
        if problem is not None:
            raise RuntimeError(f"{label}: {problem}")
        if i >= 3:
            samples.append(ms)
            step.advance()
    return samples


def _listed(expected: int, count: Callable[[httpx.Response], int]
            ) -> Callable[[httpx.Response], str | None]:
    def check(r: httpx.Response) -> str | None:
        if r.status_code != 200:
            return f"{r.status_code} {r.text[:300]}"
        got = count(r)
        return None if got == expected else f"{got} items listed, expected {expected}"
    return check


def _inbox_items(r: httpx.Response) -> int:
    return len(re.findall(r'data-testid="item"', r.text))


def _list_items(r: httpx.Response) -> int:
    return len(r.json()["items"])


async def run(
    stack: Stack, report: Report, ui: Reporter, *, parked: int, concurrency: int,
    requests: int, max_cached_workflows: int | None = None,
) -> None:
    floor = await _floor(stack, report, ui, requests)
    rest_settings = stack.settings(stack.task_queue("scale-rest"))
    at_rest.add_rows(
        report,
        await at_rest.api_at_rest(stack.root, rest_settings, API_ARGV),
        await at_rest.worker_at_rest(stack.root, rest_settings, stack.client),
    )
    overrides = {} if max_cached_workflows is None else {
        "max_cached_workflows": max_cached_workflows}
    settings = stack.settings(stack.task_queue("scale"), **overrides)
    worker = WorkerProcess(settings, stack.root / "scale-worker.log").start()
    sid = f"scale-{stack.run}"
    ids = [f"s{i:05d}" for i in range(parked)]
    server_pid = stack.server.process.pid if stack.server.process else None
    try:
        async with api_process(stack, settings, connections=concurrency + 4) as (api, proc, web):
            await api.register(sid, stack.workspace)
            # Warm-up: one call through the whole path and one of each measured request.
            await _submit(api, sid, "warm", Retries())
            body = await wait_parked(api, sid, "warm", timeout=120)
            await _approve(api, sid, body["request_id"], Retries())
            done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/warm", params={"wait": 60})
            if done.status_code != 200:
                raise RuntimeError(f"warm-up call did not finish: {done.text[:300]}")
            for r in (await web.get("/inbox"), await api.approver.get("/v1/tool-calls")):
                if r.status_code != 200:
                    raise RuntimeError(f"warm-up {r.url.path}: {r.status_code} {r.text[:300]}")
            await asyncio.sleep(1.0)
            base = {"worker": rss_mb(worker.pid), "API": rss_mb(proc.pid)}

            submit_step = ui.step(f"scale: submit {parked} calls", parked)
            park_step = ui.step(f"scale: parked (of {parked})", parked)
            retries = Retries()
            t0 = time.perf_counter()

            async def submit(cid: str) -> float:
                ms = await _submit(api, sid, cid, retries)
                submit_step.advance()
                return ms

            submits = await bounded(ids, concurrency, submit)
            t_parked = await _wait_count(stack, sid, CallStatus.PARKED, parked,
                                         300 + parked * 0.5, park_step.update, "parked")
            await asyncio.sleep(2.0)

            page = min(parked, 100)  # the inbox's page (parkgate.api.people.inbox.LIMIT)
            inbox = await timed(ui, "scale: GET /inbox", requests, lambda: web.get("/inbox"),
                                _listed(page, _inbox_items))
            mine = await timed(
                ui, "scale: GET /v1/tool-calls (session)", requests,
                lambda: api.approver.get("/v1/tool-calls", params={
                    "session_id": sid, "status": "parked", "limit": 50}),
                _listed(min(parked, 50), _list_items))
            every = await timed(
                ui, "scale: GET /v1/tool-calls (all)", requests,
                lambda: api.approver.get("/v1/tool-calls", params={"limit": 50}),
                _listed(50, _list_items) if parked >= 50 else lambda r: None)
            held = {"worker": rss_mb(worker.pid), "API": rss_mb(proc.pid)}
            shared = [pss_mb(worker.pid), pss_mb(proc.pid)]
            server = rss_mb(server_pid) if server_pid else None
    finally:
        await worker.astop()

    report.add(Row.latency("scale", f"submit {parked} writes (POST tool-calls → parked)",
                           submits, concurrency=concurrency, wall_s=t_parked - t0,
                           note=f"per s = parked per second; {retries.count} retries"))
    for name, samples in ((INBOX_ROW, inbox), (LIST_SESSION_ROW, mine), (LIST_ALL_ROW, every)):
        row = Row.latency("scale", name, samples, concurrency=1,
                          note=f"{parked} parked; {len(samples)} sequential requests",
                          target=f"p95 < {P95_LIMIT_MS:g} ms")
        row.met = (row.p95_ms or 0) < P95_LIMIT_MS
        if floor and row.p50_ms is not None:
            row.x_floor = row.p50_ms / floor
        report.add(row)
    for who in ("worker", "API"):
        report.add(Row("scale", f"{who} RSS after warm-up (baseline)",
                       value=round(base[who], 1), unit="MB"))
        report.add(Row("scale", f"{who} RSS with {parked} parked", value=round(held[who], 1),
                       unit="MB", n=parked,
                       note=f"growth {held[who] - base[who]:+.1f} MB"))
    total = held["worker"] + held["API"]
    report.add(Row("scale", SUM_ROW.format(n=parked), value=round(total, 1), unit="MB",
                   n=parked, target=f"< {RSS_SUM_LIMIT_MB:g} MB", met=total < RSS_SUM_LIMIT_MB,
                   note=f"max_cached_workflows={settings.max_cached_workflows}; "
                        "target set for 10,000 parked"))
    if None not in shared:
        report.add(Row("scale", f"worker + API PSS with {parked} parked",
                       value=round(sum(x or 0 for x in shared), 1), unit="MB", n=parked,
                       note="proportional set size: shared library pages counted once"))
    if server is not None:
        report.add(Row("scale", f"dev server RSS with {parked} parked (not in the target)",
                       value=round(server, 1), unit="MB", n=parked))


async def _floor(stack: Stack, report: Report, ui: Reporter, calls: int) -> float | None:
    """The run's serial floor: the latency phase's, or measured here on a worker of its own."""
    settings = stack.settings(stack.task_queue("scale-floor"))
    worker, _ = in_process_worker(stack, settings)
    async with worker:
        return await run_floor_p50(stack, settings.temporal_task_queue, report, ui,
                                   section="scale", calls=calls)
