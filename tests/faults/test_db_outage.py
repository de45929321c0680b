"""Stop the private PostgreSQL for 30 s in the middle of a run.

Calls already running finish or wait; calls the worker classifies while the
database is down wait for it (their remembered-rule lookup is retried until the
store answers) and then park; decisions and new submissions made during the
outage are retried by the agent (a 503 is the honest answer then, a 500 never
is). After recovery every call is terminal and ended as planned or decided,
every event is in the history (once), and `parkgate audit verify` passes over
the hash chain.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from tests.faults.conftest import StackFactory, scale
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall, check
from tests.faults.harness.drive import drive, drive_all
from tests.faults.harness.postgres import PrivatePostgres

pytestmark = [pytest.mark.postgres, pytest.mark.devserver, pytest.mark.slow,
              pytest.mark.timeout(360)]

OUTAGE_SECONDS = 30.0


def expected_events(call: PlannedCall) -> set[str]:
    """The event types a finished call of this kind must have in the history."""
    types = set()
    if call.parks:
        types |= {"tool.confirmation_requested", "tool.confirmation_resolved"}
    if call.kind in ("auto", "approve", "auto_read"):
        types |= {"tool.called", "tool.completed"}
    return types


async def started(temporal: Client, calls: list[PlannedCall], timeout: float = 60) -> None:
    """Wait until every call's workflow exists (its submission reached Temporal)."""
    deadline = time.monotonic() + timeout
    for c in calls:
        handle = temporal.get_workflow_handle(f"call/{c.session_id}/{c.tool_use_id}")
        while True:
            try:
                await handle.describe()
                break
            except RPCError:
                assert time.monotonic() < deadline, f"{c.tool_use_id} never started"
                await asyncio.sleep(0.1)


async def decide_then_wait(client: AgentClient, call: PlannedCall, path: str) -> None:
    """The human's decision on a parked call, sent at once; then wait for the end."""
    allow = call.kind == "approve"
    r = await client.request("POST", path, deadline=time.monotonic() + 180, json={
        "decision": "allow" if allow else "deny", "reason": "" if allow else "no"})
    assert r.status_code == 200, f"decide {call.tool_use_id}: {r.status_code} {r.text}"
    call.final = await client.wait_status(call.session_id, call.tool_use_id, TERMINAL,
                                          timeout=120)


async def test_database_outage_mid_run(make_stack: StackFactory,
                                       private_pg: PrivatePostgres) -> None:
    stack = await make_stack(workers=1, database_url=private_pg.url)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    temporal = await Client.connect(stack.temporal_address)
    await client.register_session("s-auto", str(stack.trusted))
    await client.register_session("s-park", str(stack.untrusted))
    n = scale(6, 50)

    # Before the outage: long runners that straddle it, and parked calls.
    before = [PlannedCall("auto", "s-auto", "t1", f"tu_long_{i}", stack.trusted, sleep=5)
              for i in range(n)]
    parked = [PlannedCall(kind, "s-park", "t1", f"tu_park_{i}", stack.untrusted)
              for i, kind in enumerate(["approve", "deny"] * n)]
    # Submitted before, classified during the outage: they must park, not fail.
    late = [PlannedCall(kind, "s-park", "t2", f"tu_late_{i}", stack.untrusted)
            for i, kind in enumerate(["approve", "deny"] * n)]
    # During the outage: new submissions, auto and parking.
    during = [PlannedCall(kind, sid, "t3", f"tu_during_{i}", ws)
              for i, (kind, sid, ws) in enumerate(
                  [("auto", "s-auto", stack.trusted), ("approve", "s-park", stack.untrusted),
                   ("deny", "s-park", stack.untrusted)] * n)]

    for c in before + parked:
        await client.submit(c.session_id, c.turn_id, c.block())
    confirm: dict[str, str] = {}  # tool_use_id -> the path that decides it
    for c in parked:
        res = await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=60)
        assert res.get("status") == "parked", res
        c.history.append("parked")
        rid = await client.request_id(c.session_id, res)
        confirm[c.tool_use_id] = (f"/v1/sessions/{c.session_id}/turns/{c.turn_id}"
                                  f"/confirmations/{rid}")
    await asyncio.sleep(1.0)  # the long runners are mid-execution now

    # Freeze the worker (not its tools) so `late` is classified only once the
    # database is down.
    worker = stack.live_workers()[0]
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGSTOP)
    client.errors.fault_active = True
    late_work = asyncio.gather(*(drive(client, c, timeout=180) for c in late))
    try:
        await started(temporal, late)
        outage = asyncio.create_task(private_pg.outage(OUTAGE_SECONDS))
        while private_pg.started:
            await asyncio.sleep(0.05)
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    # Humans decide and agents submit while the database is down.
    work = asyncio.gather(
        late_work,
        *(decide_then_wait(client, c, confirm[c.tool_use_id]) for c in parked),
        drive_all(client, during, timeout=180),
        *(drive(client, c, timeout=180) for c in before),
    )
    await outage
    # Every decision sent while the database was down was refused with a 503
    # that says when to retry (not applied, not lost: the retry decided it).
    assert set(confirm.values()) <= client.errors.advised, client.errors.advised
    await asyncio.sleep(5.0)  # connection pools notice the database is back
    client.errors.fault_active = False
    await work

    calls = before + parked + late + during
    verdict = check(calls)
    summary.add(calls_run=len(calls), faults_injected=1, lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, (
        verdict.problems() + "\n" + stack.logs()
    )
    assert verdict.outcome_unknown == 0
    # Every event is in the history, once. A call may report its outcome while
    # its last store write is still retrying, so give recording a bounded while.
    missing: list[str] = []
    dupes: list[str] = []
    deadline = time.monotonic() + 60
    pending = list(calls)
    while pending:
        still: list[PlannedCall] = []
        missing, dupes = [], []
        for c in pending:
            events = await client.events(c.session_id, c.tool_use_id)
            types = [e.get("type") for e in events]
            ids = [e.get("event_id") for e in events if e.get("event_id")]
            if len(ids) != len(set(ids)):
                dupes.append(f"{c.tool_use_id}: {ids}")
            if not expected_events(c) <= set(types):
                missing.append(f"{c.tool_use_id}: {types}")
                still.append(c)
        pending = still
        if not pending or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    await client.aclose()

    audit = await stack.acli("audit", "verify")
    assert not missing, missing[:5]
    assert not dupes, dupes[:5]
    assert audit.returncode == 0, f"audit verify: {audit.stdout}\n{audit.stderr}"
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )
