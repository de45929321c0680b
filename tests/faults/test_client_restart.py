"""A client-executed call survives parkgate restarting between release and outcome.

The call is released, claimed and started; then the API is SIGKILLed and restarted and
the only worker is SIGKILLed and replaced. The client's outcome still lands:
the call ends `succeeded` with the client's result, released once, claimed once.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import StackFactory
from tests.faults.harness.apiclient import AgentClient

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]

DEPLOY = {"name": "deploy", "description": "deploy (the client runs it)",
          "side_effects": "execute", "input_schema": {"type": "object"}}


async def test_outcome_lands_across_api_and_worker_restarts(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True  # restarts happen: retry any 5xx
    deadline = lambda: time.monotonic() + 60  # noqa: E731
    sid = "s-client"
    r = await client.request("POST", "/v1/sessions", deadline=deadline(), json={
        "session_id": sid, "workspace_path": str(stack.untrusted), "client_tools": [DEPLOY]})
    assert r.status_code == 201, r.text
    await client.submit(sid, "t1", {"id": "tu_c", "name": "deploy", "input": {"n": 1}})
    parked = await client.wait_status(sid, "tu_c", {"parked"}, timeout=60)
    rid = await client.request_id(sid, parked)
    assert (await client.decide(sid, "t1", rid, "allow")).status_code == 200
    released = await client.wait_status(sid, "tu_c", {"released"}, timeout=60)
    assert released["input"] == {"n": 1}
    claim = await client.request("POST", f"/v1/sessions/{sid}/tool-calls/tu_c/claim",
                                 deadline=deadline(), json={"lease_seconds": 600})
    assert claim.status_code == 200, claim.text
    start = await client.request("POST", f"/v1/sessions/{sid}/tool-calls/tu_c/start",
                                 deadline=deadline(), json={"claim_id": claim.json()["claim_id"]})
    assert start.status_code == 200, start.text  # runs from here: the lease, not a reservation

    await stack.restart_api(kill=True)
    (old,) = stack.live_workers()
    await stack.kill_worker(old)
    stack.start_worker()

    report = {"content": "ran it", "is_error": False,
              "input_sha256": claim.json()["input_sha256"]}
    out = await client.request("POST", f"/v1/sessions/{sid}/tool-calls/tu_c/outcome",
                               deadline=time.monotonic() + 120, json=report)
    assert out.status_code == 200, out.text + stack.logs()
    assert out.json()["status"] == "succeeded"
    final = await client.wait_status(sid, "tu_c", {"succeeded"}, timeout=60)
    assert final["result"]["content"][0]["text"] == "ran it"
    types = [e["type"] for e in await client.events(sid, "tu_c")]
    assert types.count("tool.released") == 1 and types.count("tool.claimed") == 1
    assert types.count("tool.outcome_reported") == 1
    await client.aclose()
