"""Restart the Temporal dev server while 50 calls are parked: all can still be
approved afterwards, and each runs exactly once."""

from __future__ import annotations

import asyncio

import pytest

from tests.faults.conftest import SOAK, StackFactory, scale
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall, check
from tests.faults.harness.temporal import DevServer

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    "kill",
    [
        pytest.param(False, id="sigterm",
                     marks=pytest.mark.skipif(not SOAK, reason="soak mode only (PARKGATE_SOAK=1)")),
        pytest.param(True, id="sigkill"),
    ],
)
async def test_devserver_restart_with_parked_calls(
    make_stack: StackFactory, devserver: DevServer, kill: bool
) -> None:
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    await client.register_session("s-park", str(stack.untrusted))
    n = scale(50, 200)
    calls = [PlannedCall("approve", "s-park", "t1", f"tu_park_{i:03d}", stack.untrusted)
             for i in range(n)]
    gate = asyncio.Semaphore(16)

    async def submit_and_park(c: PlannedCall) -> dict:
        async with gate:
            await client.submit(c.session_id, c.turn_id, c.block())
            return await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=90)

    parked = await asyncio.gather(*(submit_and_park(c) for c in calls))
    assert all(p.get("status") == "parked" for p in parked), [p.get("status") for p in parked]

    client.errors.fault_active = True
    await devserver.restart(kill=kill)
    stack.faults += 1
    # A worker whose server vanished may have exited; an operator restarts it.
    if not stack.live_workers():
        stack.start_worker()

    async def approve(c: PlannedCall, p: dict) -> None:
        async with gate:
            rid = await client.request_id(c.session_id, p)
            await client.decide(c.session_id, c.turn_id, rid, "allow", timeout=90)
            c.final = await client.wait_status(c.session_id, c.tool_use_id, TERMINAL,
                                               timeout=120)

    await asyncio.gather(*(approve(c, p) for c, p in zip(calls, parked, strict=True)))
    client.errors.fault_active = False
    await client.aclose()

    verdict = check(calls)
    summary.add(calls_run=len(calls), faults_injected=1, lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, (
        verdict.problems() + "\n" + stack.logs()
    )
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )
