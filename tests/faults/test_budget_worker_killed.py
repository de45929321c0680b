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
    calls = [await client.wait_status(sid, cid, {"succeeded", "failed", "parked"}, timeout=120)
             for cid in ids]
    statuses = [c["status"] for c in calls]
    # Three fit the budget and run; one the kill caught mid-run ends failed
    # (at most once: never run again). Three park at the cap.
    assert statuses.count("succeeded") + statuses.count("failed") == 3, statuses
    assert statuses.count("parked") == 3, statuses
    for call in calls:
        if call["status"] == "failed":
            assert "worker" in call["result"]["content"][0]["text"], call

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
        rows = {cid: await repo.get_call(sid, cid) for cid in ids}
    finally:
        await repo.close()
    assert all(len(found) == 1 for found in charges.values()), charges
    # A call is charged if it started (the execute activity stores its start
    # before the tool runs), released if a kill came before that; the parked
    # ones nobody approved stay over the cap.
    first = {c["tool_use_id"]: c["status"] for c in calls}
    want: dict[str, str] = {}
    for cid, row in rows.items():
        assert row is not None, cid
        started = row.started_at is not None or row.status.value in ("succeeded",
                                                                      "outcome_unknown")
        if cid != parked["tool_use_id"] and first[cid] == "parked":
            want[cid] = "over"
        else:
            assert started or row.status.value == "failed", row
            want[cid] = "charged" if started else "released"
    got = {cid: found[0].state for cid, found in charges.items()}
    assert got == want, (got, rows)
    used = sum(1 for state in want.values() if state == "charged")
    assert {found[0].used_now for found in charges.values()} == {used * UNIT}
