"""Restart the API (SIGKILL, or SIGTERM) twice while agents hold long-polls.

The agents reconnect and re-attach by tool_use_id — half by polling the call,
half by re-submitting the same block — and every one gets its result; no call
runs twice.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.conftest import StackFactory, scale
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall, check

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]


async def long_poll_until_done(client: AgentClient, call: PlannedCall, *, resubmit: bool,
                               timeout: float) -> None:
    """An agent that only ever long-polls (wait=20) and re-attaches after any drop."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if resubmit:
            res = await client.submit(call.session_id, call.turn_id, call.block(), wait=20,
                                      timeout=deadline - time.monotonic())
        else:
            res = await client.get(call.session_id, call.tool_use_id, wait=20,
                                   timeout=deadline - time.monotonic())
        call.history.append(str(res.get("status")))
        if res.get("status") in TERMINAL:
            call.final = res
            return


@pytest.mark.parametrize("kill", [True, False], ids=["sigkill", "sigterm"])
async def test_api_restart_during_long_polls(make_stack: StackFactory, kill: bool) -> None:
    """SIGKILL is a crash; SIGTERM is a deploy (uvicorn's graceful shutdown while
    long-polls are in flight must not answer them with a 500)."""
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True  # restarts happen throughout: agents retry any 5xx
    await client.register_session("s-auto", str(stack.trusted))
    await client.register_session("s-park", str(stack.untrusted))

    n = scale(12, 60)
    # Slow auto calls (still running across both restarts) and parked calls
    # (approved between the restarts).
    auto = [PlannedCall("auto", "s-auto", "t1", f"tu_auto_{i}", stack.trusted, sleep=6)
            for i in range(n)]
    parked = [PlannedCall("approve", "s-park", "t1", f"tu_park_{i}", stack.untrusted)
              for i in range(n)]
    calls = auto + parked
    for c in calls:
        await client.submit(c.session_id, c.turn_id, c.block())

    pollers = [
        asyncio.create_task(long_poll_until_done(client, c, resubmit=i % 2 == 0, timeout=120))
        for i, c in enumerate(calls)
    ]
    await asyncio.sleep(1.0)  # let every poller get its long-poll in flight
    await stack.restart_api(kill=kill)

    for c in parked:
        res = await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=60)
        assert res.get("status") == "parked", res
        rid = await client.request_id(c.session_id, res)
        await client.decide(c.session_id, c.turn_id, rid, "allow")

    await asyncio.sleep(0.3)
    await stack.restart_api(kill=kill)
    done = await asyncio.gather(*pollers, return_exceptions=True)
    await client.aclose()

    errors = [d for d in done if isinstance(d, BaseException)]
    verdict = check(calls)
    summary.add(calls_run=len(calls), faults_injected=2, lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not errors, errors[:3]
    assert client.retries > 0, "no client ever saw the API go away; the restart proved nothing"
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, (
        verdict.problems() + "\n" + stack.logs()
    )
    assert verdict.outcome_unknown == 0  # the worker never died here
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )
