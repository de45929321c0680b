"""An agent SIGKILLed while its client-executed call is parked, then the call
is approved (issue 36): the restarted agent (same tool_use_id) runs it once.

The agent's long-poll is still inside the API when the approval lands; the
call must neither be claimed for the dead request (the restart would wait
out a lease and be told `outcome_unknown`) nor need a second approval.
Real `parkgate serve`-like stack: API and worker processes, dev server.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.agent_client.test_killed_agent import Agent
from tests.faults.conftest import StackFactory
from tests.faults.harness import summary
from tests.faults.harness.apiclient import AgentClient

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_agent_killed_while_parked_then_approved_runs_the_call_once(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    sid, tid = f"s-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    runs = stack.untrusted / "runs.txt"

    async def agent() -> Agent:
        return await Agent.spawn("async", stack.base_url, stack.api_key or "", sid, tid, runs,
                                 stack.untrusted)

    first, second = await agent(), await agent()
    await first.go()
    await first.expect("SUBMITTING")
    until = time.monotonic() + 120
    while True:  # the gate registers the session, then submits
        r = await client.request("GET", f"/v1/sessions/{sid}/tool-calls/{tid}",
                                 deadline=time.monotonic() + 30)
        if r.status_code in (200, 202) and r.json()["status"] == "parked":
            parked = r.json()
            break
        assert time.monotonic() < until, r.text
        await asyncio.sleep(0.2)
    await first.kill()
    rid = await client.request_id(sid, parked)
    assert (await client.decide(sid, "t", rid, "allow")).status_code == 200
    approved = time.monotonic()
    await second.go()
    result = await second.expect("RESULT", timeout=120)
    took = time.monotonic() - approved
    final = await client.wait_status(sid, tid, {"succeeded", "failed", "outcome_unknown"},
                                     timeout=60)
    ran = runs.read_text().splitlines() if runs.exists() else []
    types = [e["type"] for e in await client.events(sid, tid)]
    approvals = types.count("tool.confirmation_requested")
    lost = int(final["status"] != "succeeded")
    twice = max(0, len(ran) - 1)
    summary.add(calls_run=1, faults_injected=1, lost=lost, duplicate_executions=twice)
    print(f"agent killed while parked: lost={lost} run twice={twice} approvals={approvals} "
          f"restart ran it {took:.1f} s after the approval")
    assert result.startswith("RESULT False"), result
    assert (lost, twice, approvals, len(ran)) == (0, 0, 1, 1), (final, ran, types)
    assert took < 60, took  # not a lease (300 s), not a reservation to lapse
    await client.aclose()
