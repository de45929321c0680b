"""Stop the private PostgreSQL for 10 s in the middle of a run.

Calls already running finish or wait; decisions and new submissions made during
the outage are retried by the agent (a 503 is the honest answer then, a 500 never
is). After recovery every call is terminal, every event is in the history (once),
and `parkgate audit verify` passes over the hash chain.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.conftest import StackFactory, scale
from tests.faults.harness import summary
from tests.faults.harness.apiclient import AgentClient
from tests.faults.harness.calls import PlannedCall, check
from tests.faults.harness.drive import drive, drive_all
from tests.faults.harness.postgres import PrivatePostgres

pytestmark = [pytest.mark.postgres, pytest.mark.devserver, pytest.mark.slow,
              pytest.mark.timeout(300)]

OUTAGE_SECONDS = 10.0


def expected_events(call: PlannedCall) -> set[str]:
    """The event types a finished call of this kind must have in the history."""
    types = set()
    if call.parks:
        types |= {"tool.confirmation_requested", "tool.confirmation_resolved"}
    if call.kind in ("auto", "approve", "auto_read"):
        types |= {"tool.called", "tool.completed"}
    return types


async def test_database_outage_mid_run(make_stack: StackFactory,
                                       private_pg: PrivatePostgres) -> None:
    stack = await make_stack(workers=1, database_url=private_pg.url)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    await client.register_session("s-auto", str(stack.trusted))
    await client.register_session("s-park", str(stack.untrusted))
    n = scale(10, 50)

    # Before the outage: long runners that straddle it, and parked calls.
    before = [PlannedCall("auto", "s-auto", "t1", f"tu_long_{i}", stack.trusted, sleep=5)
              for i in range(n)]
    parked = [PlannedCall(kind, "s-park", "t1", f"tu_park_{i}", stack.untrusted)
              for i, kind in enumerate(["approve", "deny"] * n)]
    # During the outage: new submissions.
    during = [PlannedCall("auto", "s-auto", "t2", f"tu_during_{i}", stack.trusted)
              for i in range(n)]

    for c in before + parked:
        await client.submit(c.session_id, c.turn_id, c.block())
    for c in parked:
        res = await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=60)
        assert res.get("status") == "parked", res
        c.history.append("parked")
    await asyncio.sleep(1.0)  # the long runners are mid-execution now

    client.errors.fault_active = True
    outage = asyncio.create_task(private_pg.outage(OUTAGE_SECONDS))
    await asyncio.sleep(1.0)
    # Humans decide and agents submit while the database is down.
    work = asyncio.gather(
        drive_all(client, parked, timeout=150),
        drive_all(client, during, timeout=150),
        *(drive(client, c, timeout=150) for c in before),
    )
    await outage
    await asyncio.sleep(5.0)  # connection pools notice the database is back
    client.errors.fault_active = False
    await work

    calls = before + parked + during
    verdict = check(calls)
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
    summary.add(calls_run=len(calls), faults_injected=1, lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, (
        verdict.problems() + "\n" + stack.logs()
    )
    assert verdict.outcome_unknown == 0
    assert not missing, missing[:5]
    assert not dupes, dupes[:5]
    assert audit.returncode == 0, f"audit verify: {audit.stdout}\n{audit.stderr}"
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )
