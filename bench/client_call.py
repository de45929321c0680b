"""Phase `client`: a client-executed call, end to end, beside the floor (issue 27).

A session declares a client tool (side effects `read`: the bench policy
auto-approves it); the agent's own gate (`parkgate.agent_client.AsyncToolGate`
over the real API in uvicorn, API key) drives each call as an agent does:
`POST .../tool-calls?wait=&claim=true` until released (the claim travels
with the release: `claim_won`; a `POST .../claim` only when it did not), run
the tool here (a no-op coroutine), `POST .../outcome` until the outcome is
recorded.
Measured: the whole `gate.call(...)`, one call after another, and each of
its requests on the way (the same calls, timed by the client). The worker
runs in the API's process (as `parkgate serve` runs them), eager start on.

The floor is one empty workflow timed after each call, on the same worker
(`bench.serial_floor.PairedFloor`; not in a `--profile` run, whose rows are
not to be quoted). Each call's CPU is metered from its start to the end of
an untimed settle after it (`bench.cpu.SettledCpu`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict
from typing import Any

from bench.cpu import CpuMeter, SettledCpu
from bench.profile import Probe
from bench.progress import Reporter
from bench.report import Report, Row
from bench.serial_floor import PairedFloor
from bench.stack import Stack, durable_dispatcher, in_process_worker, serve_api
from parkgate.agent_client import AsyncParkgateClient, AsyncToolGate
from parkgate.agent_client.client_tools import definition
from parkgate.durable.payloads import call_workflow_id

#: Target: a client-executed call's p50 within this multiple of the serial floor.
CLIENT_TARGET = 3.0
#: The client tool every measured call names (declared with the session).
TOOL = "bench_lookup"
#: Row names, by the client method that sent the request.
STEPS = {
    "submit": "POST tool-calls ?wait=&claim=true → released, claimed",
    "claim": "POST claim → lease (200; only when the claim did not travel with the release)",
    "report_outcome": "POST outcome → recorded (200)",
    "get_call": "GET tool-call (re-read while not released)",
}
CALL_ROW = "gated call (AsyncToolGate: submit → released → claim → run → outcome)"


class TimedClient(AsyncParkgateClient):
    """The agent's client, timing each request the gate sends by method."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.recording = False
        self.probe: Probe | None = None

    def _record(self, step: str, t0: float) -> None:
        if self.recording:
            ms = (time.perf_counter() - t0) * 1000
            self.samples[step].append(ms)
            if self.probe is not None:
                self.probe.note(f"agent HTTP: {STEPS[step]}", ms)

    async def submit(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await super().submit(*args, **kwargs)
        finally:
            self._record("submit", t0)

    async def get_call(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await super().get_call(*args, **kwargs)
        finally:
            self._record("get_call", t0)

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await super().claim(*args, **kwargs)
        finally:
            self._record("claim", t0)

    async def report_outcome(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await super().report_outcome(*args, **kwargs)
        finally:
            self._record("report_outcome", t0)


async def _lookup(released: dict[str, Any]) -> str:
    """The client's own tool: returns at once, so the row is parkgate's cost."""
    return f"value of {released['key']}"


async def run(stack: Stack, report: Report, ui: Reporter, *, calls: int,
              profile: bool = False) -> None:
    settings = stack.settings(stack.task_queue("client"))
    worker, pipeline = in_process_worker(stack, settings)
    dispatcher = durable_dispatcher(stack, settings, pipeline.registry, eager=True)
    server = stack.server.process.pid if stack.server.process else None
    meter = CpuMeter({"this process": os.getpid(), "dev server": server})
    async with worker, serve_api(stack, settings, pipeline.registry, dispatcher=dispatcher) as api:
        floor = PairedFloor(stack, settings.temporal_task_queue, "client")
        await floor.warm_up()
        cpu = SettledCpu(meter)
        await cpu.calibrate()
        client = TimedClient(api.base_url, api.key)
        async with client:
            gate = AsyncToolGate(client, f"client-{stack.run}", str(stack.workspace))
            gate.add(definition(TOOL, "Look a key up (the bench's client tool)",
                                {"type": "object", "properties": {"key": {"type": "string"}},
                                 "required": ["key"]}, "read"))

            async def one(tag: str, i: int) -> float:
                t0 = time.perf_counter()
                result = await gate.call(TOOL, {"key": f"{tag}-{i}"}, _lookup,
                                         tool_use_id=f"client-{stack.run}-{tag}-{i}")
                elapsed = (time.perf_counter() - t0) * 1000
                if result.is_error or result.text != f"value of {tag}-{i}":
                    raise RuntimeError(f"client call {tag}-{i} failed: {result.text}")
                return elapsed

            for i in range(3):  # warm up (the first also registers the session and tool)
                await one("warm", i)
            step = ui.step("client-executed calls", calls)
            probe = Probe(stack.client, stack.store).install() if profile else None
            client.probe = probe
            client.recording = True
            start = time.perf_counter()
            totals: list[float] = []
            with probe.measuring() if probe else contextlib.nullcontext() as sampler:
                for i in range(calls):
                    if probe is not None:
                        probe.next_call()
                    async with cpu.metered("call"):
                        totals.append(await one("call", i))
                    if probe is None:  # a profiled run times nothing against the floor
                        await floor.one()
                    step.advance()
            wall = time.perf_counter() - start
            client.recording = False
            if probe is not None:
                probe.uninstall()
                probe.workflow_ids = [call_workflow_id(gate.session_id,
                                                       f"client-{stack.run}-call-{i}")
                                      for i in range(calls)]
                assert sampler is not None
                report.setup.setdefault("profile", []).append(
                    await probe.breakdown("client", calls, wall, sampler))
    requests = sum(len(v) for v in client.samples.values())
    floor_p50 = floor.add_row(report)
    row = Row.latency("client", CALL_ROW, totals, concurrency=1, wall_s=wall,
                      note=f"{cpu.text('call')}; {requests / calls:.1f} requests/call")
    if floor_p50 and row.p50_ms is not None:
        row.x_floor = row.p50_ms / floor_p50
        row.target = f"p50 ≤ {CLIENT_TARGET:g}x floor"
        row.met = row.x_floor <= CLIENT_TARGET
    report.add(row)
    for method, name in STEPS.items():
        samples = client.samples.get(method)
        if samples:
            step_row = Row.latency("client", f"step: {name}", samples, concurrency=1)
            if floor_p50 and step_row.p50_ms is not None:
                step_row.x_floor = step_row.p50_ms / floor_p50
            report.add(step_row)

