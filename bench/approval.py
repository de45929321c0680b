"""Phase 2: approval round trip through the HTTP API.

The agent submits a write under approve/ (the bench policy parks it), waits
until it is parked, and long-polls for the result
(`GET .../tool-calls/{id}?wait=60`). A human's decision then arrives as
`POST .../confirmations/{request_id}`. Measured: from just before that POST
is sent until the agent's long-poll returns 200 with the result. The app
runs in uvicorn on a free port with a worker in the same process, as
`parkgate serve` runs them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.progress import Reporter
from bench.report import Report, Row
from bench.serial_floor import PairedFloor
from bench.stack import Api, Stack, durable_dispatcher, in_process_worker, serve_api

#: Time given to the long-poll to reach its wait before the decision is sent.
LONG_POLL_HEAD_START = 0.3


async def wait_parked(api: Api, sid: str, cid: str, timeout: float = 60.0) -> dict[str, Any]:
    """Poll the call resource until it is parked with a request id."""
    deadline = time.monotonic() + timeout
    while True:
        r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}")
        body: dict[str, Any] = r.json()
        if body.get("status") == "parked" and body.get("request_id"):
            return body
        if time.monotonic() > deadline:
            raise RuntimeError(f"call {cid} never parked: {body}")
        await asyncio.sleep(0.02)


async def round_trip(api: Api, sid: str, turn: str, cid: str) -> tuple[float, float]:
    """(decision POST -> long-poll 200, decision POST response) in ms, for one call."""
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/{turn}/tool-calls",
        json={"id": cid, "name": "write_file",
              "input": {"path": f"approve/{cid}.txt", "content": "approved\n"}},
    )
    if r.status_code not in (200, 202):
        raise RuntimeError(f"submit failed: {r.status_code} {r.text}")
    parked = await wait_parked(api, sid, cid)
    poll = asyncio.create_task(
        api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 60})
    )
    await asyncio.sleep(LONG_POLL_HEAD_START)
    if poll.done():
        raise RuntimeError(f"long-poll returned before the decision: {poll.result().text}")
    t0 = time.perf_counter()
    decided = await api.approver.post(
        f"/v1/sessions/{sid}/turns/{turn}/confirmations/{parked['request_id']}",
        json={"decision": "allow", "decided_by": "bench"},
    )
    t_post = time.perf_counter()
    if decided.status_code != 200:
        poll.cancel()
        raise RuntimeError(f"decision failed: {decided.status_code} {decided.text}")
    result = await poll
    t1 = time.perf_counter()
    body = result.json()
    if result.status_code != 200 or body.get("status") != "succeeded":
        raise RuntimeError(f"long-poll did not return the result: {result.status_code} {body}")
    return (t1 - t0) * 1000, (t_post - t0) * 1000


#: Approval → result p50 as a multiple of the serial empty-workflow floor (issue 27; was 3x).
APPROVAL_TARGET = 2.5


async def run(stack: Stack, report: Report, ui: Reporter, *, samples: int) -> None:
    settings = stack.settings(stack.task_queue("approval"))
    worker, pipeline = in_process_worker(stack, settings)
    dispatcher = durable_dispatcher(stack, settings, pipeline.registry, eager=True)
    async with worker, serve_api(stack, settings, pipeline.registry, dispatcher=dispatcher) as api:
        sid = f"approval-{stack.run}"
        await api.register(sid, stack.workspace)
        for i in range(2):  # warm up
            await round_trip(api, sid, "t", f"warm-{i}")
        step = ui.step("approval round trips", samples)
        trips: list[float] = []
        posts: list[float] = []
        floor = PairedFloor(stack, settings.temporal_task_queue, "approval")
        await floor.warm_up()
        for i in range(samples):
            trip, post = await round_trip(api, sid, "t", f"call-{i}")
            trips.append(trip)
            posts.append(post)
            await floor.one()
            step.advance()
    trip_row = Row.latency("approval", "decision POST → agent's long-poll returns 200", trips,
                           concurrency=1)
    floor_p50 = floor.add_row(report)
    if floor_p50 and trip_row.p50_ms is not None:
        # The human-felt round trip within 2.5x the engine's own floor (issue 27),
        # the floor timed after each round trip on the same worker.
        trip_row.x_floor = trip_row.p50_ms / floor_p50
        trip_row.target = f"p50 ≤ {APPROVAL_TARGET:g}x floor"
        trip_row.met = trip_row.x_floor <= APPROVAL_TARGET
    report.add(trip_row)
    report.add(Row.latency("approval", "decision POST response (update accepted)", posts,
                           concurrency=1))
