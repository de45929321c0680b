"""Budgets through worker crashes (issue 39, part 4): the worker is SIGKILLed
while six calls race for a budget of three, and again just after a parked one
is approved. Real `parkgate worker` and API processes, dev server, SQLite.

Whatever the moment of the kills, classify runs again on the new worker and
finds its call's charges: each call holds one charge, three run, three park
at the cap, the approved one runs at most once and is charged once if it
started (4 of 3 used), released if the kill came first."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from parkgate.rules.budgets import UNIT
from parkgate.store.repository import Repository
from tests.faults.conftest import StackFactory
from tests.faults.harness.apiclient import AgentClient

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]

BUDGETS = {"writes": {"limit": 3, "tools": ["write_file"]}}


async def test_worker_killed_around_charges_charges_each_call_once(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=1, extra_env={"PARKGATE_BUDGETS": json.dumps(BUDGETS)})
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True  # a 503 while no worker serves is honest
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await client.register_session(sid, str(stack.trusted))  # writes run at once there
    ids = [f"w{i}" for i in range(6)]
    submits = [asyncio.create_task(client.submit(sid, "t1", {
        "id": cid, "name": "write_file", "input": {"path": f"{cid}.txt", "content": cid}}))
        for cid in ids]
    await asyncio.sleep(0.2)
    for worker in stack.live_workers():
        await stack.kill_worker(worker)
    stack.start_worker()
    await asyncio.gather(*submits)
    calls = [await client.wait_status(sid, cid, {"succeeded", "parked"}, timeout=120)
             for cid in ids]
    statuses = [c["status"] for c in calls]
    assert statuses.count("succeeded") == 3 and statuses.count("parked") == 3, statuses

    parked = next(c for c in calls if c["status"] == "parked")
    await client.decide(sid, "t1", parked["request_id"], "allow", not_found_grace=10)
    for worker in stack.live_workers():
        await stack.kill_worker(worker)
    stack.start_worker()
    done = await client.wait_status(sid, parked["tool_use_id"], {"succeeded"}, timeout=120)
    # Killed while it ran, the call ends failed (at most once: never run again);
    # it may have run, so it is charged either way.
    assert done["status"] in ("succeeded", "failed"), done
    if done["status"] == "failed":
        assert "worker" in done["result"]["content"][0]["text"], done

    repo = await Repository.connect(stack.database_url)
    try:
        charges = {cid: await repo.call_charges(sid, cid) for cid in ids}
        row = await repo.get_call(sid, parked["tool_use_id"])
    finally:
        await repo.close()
    assert all(len(rows) == 1 for rows in charges.values()), charges
    assert row is not None
    # Charged if it started (the execute activity stores its start before the
    # tool runs), released if the kill came before that.
    ran = row.started_at is not None
    assert ran or done["status"] == "failed"
    approved = charges[parked["tool_use_id"]][0].state
    assert approved == ("charged" if ran else "released"), (approved, row)
    states = sorted(rows[0].state for cid, rows in charges.items()
                    if cid != parked["tool_use_id"])
    assert states == ["charged"] * 3 + ["over"] * 2, states
    assert {rows[0].used_now for rows in charges.values()} == {(4 if ran else 3) * UNIT}
