"""Decision storm: many humans decide each parked call at the same moment, through
the approval link, the HTTP API and the CLI, with allow / deny / allow_with_edits
mixed — once while workers are SIGKILLed, once while the store is down.

A tool that reached the Temporal frontend forges decisions meanwhile (issue
28): every parked call gets the `decide` update and signal in every shape a
direct Temporal client can make (plaintext, codec-sealed without a valid
proof), naming invented deciders; none is accepted and none is recorded.

Invariants (issue 12): exactly one decider per call is told it won (a 200, or a
retried request whose 409 names that same decider); every loser's 409 names the
recorded winner; the confirmation_resolved event, the call row and the approval
row agree; the file exists if and only if the recorded decision allowed it
(with the winner's edits); `parkgate audit verify` (chains and meaning) and
`--against-temporal` pass.

CI size: 2 rounds x 6 calls x 20 deciders (9 API, 9 link, 2 CLI) = 240 decisions,
about 70 s here. PARKGATE_SOAK=1: 2 rounds x 50 calls x 20 deciders (8 API,
7 link, 5 CLI). PARKGATE_STORM_CALLS / PARKGATE_STORM_DECIDERS="api,link,cli"
override the sizes. Twenty deciders on one call is the shape that exposed the
bug: with decision writes made by local activities (before the fix) this
scenario reports contradicting records in most rounds.
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from tests.faults.conftest import SOAK, StackFactory, scale
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.forgery import forge_storm, forged_winners
from tests.faults.harness.postgres import PrivatePostgres
from tests.faults.harness.stack import Stack, parse_key
from tests.faults.harness.storm import (
    StormCall,
    api_key_name,
    check_storm,
    plan_deciders,
    storm,
)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.devserver,
    pytest.mark.slow,
    pytest.mark.timeout(1800 if SOAK else 420),
]

CALLS = int(os.environ.get("PARKGATE_STORM_CALLS") or scale(6, 50))
#: PARKGATE_STORM_DECIDERS="api,link,cli" overrides the per-channel counts.
_SPLIT = os.environ.get("PARKGATE_STORM_DECIDERS", "")
DECIDERS = (
    dict(zip(("api", "link", "cli"), (int(x) for x in _SPLIT.split(",")), strict=True))
    if _SPLIT
    else {"api": scale(9, 8), "link": scale(9, 7), "cli": scale(2, 5)}
)
OUTAGE_SECONDS = 4.0


async def park(client: AgentClient, calls: list[StormCall]) -> None:
    for call in calls:
        await client.submit(call.session_id, call.turn_id, call.block())
    for call in calls:
        parked = await client.wait_status(
            call.session_id, call.tool_use_id, {"parked"}, timeout=120
        )
        assert parked.get("status") == "parked", parked
        call.request_id = await client.request_id(call.session_id, parked)
        url = str(parked.get("approval_url") or "")
        assert "/approve/" in url, parked
        call.approval_path = url[url.index("/approve/"):]


async def finish(client: AgentClient, calls: list[StormCall]) -> dict[str, list[dict]]:
    events: dict[str, list[dict]] = {}
    for call in calls:
        call.final = await client.wait_status(
            call.session_id, call.tool_use_id, TERMINAL, timeout=180
        )
        events[call.tool_use_id] = await client.events(call.session_id, call.tool_use_id)
    return events


async def kill_workers_meanwhile(stack: Stack, stop: asyncio.Event, rng: random.Random) -> int:
    """SIGKILL a serving worker every 0.3-1.5 s of the storm, restarting to two.

    A kill lands only while both workers poll, so the other one serves
    meanwhile. Killing whatever process is alive livelocked on a loaded
    machine: when a worker's start-up (imports, connecting: seconds there)
    outlasts the interval between kills, no worker ever polls, no decision can
    be taken, and the deciders retry their 503s until they give up."""
    kills = 0
    first = True
    while not stop.is_set():
        try:
            # The first crash lands while the deciders' updates are in flight.
            wait = rng.uniform(0.05, 0.4) if first else rng.uniform(0.3, 1.5)
            first = False
            await asyncio.wait_for(stop.wait(), wait)
            break
        except TimeoutError:
            pass
        serving = await stack.serving_workers()
        if len(serving) >= 2:
            await stack.kill_worker(rng.choice(serving))
            kills += 1
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        while len(stack.live_workers()) < 2:
            stack.start_worker()
    return kills


async def approver_keys(stack: Stack) -> list[str]:
    """One approver key per API decider (`parkgate keys create`, in parallel)."""

    def create(i: int) -> str:
        out = stack.must("keys", "create", "--name", api_key_name(i), "--role", "approver")
        return parse_key(out)

    return list(await asyncio.gather(
        *(asyncio.to_thread(create, i) for i in range(DECIDERS["api"]))
    ))


def round_calls(stack: Stack, name: str, keys: list[str]) -> list[StormCall]:
    (stack.untrusted / "storm").mkdir(exist_ok=True)
    calls = []
    for i in range(CALLS):
        tu = f"tu_{name}_{i}"
        call = StormCall(f"s-{name}", "t1", tu, stack.untrusted)
        call.deciders = plan_deciders(tu, **DECIDERS, api_keys=keys)
        calls.append(call)
    return calls


async def test_decision_storm(make_stack: StackFactory, private_pg: PrivatePostgres) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    stack = await make_stack(workers=2, database_url=private_pg.url)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    keys = await approver_keys(stack)
    client.errors.fault_active = True  # 503 is honest while workers or the store are down
    faults = 0
    all_calls: list[StormCall] = []
    verdicts = []

    # Round 1: workers SIGKILLed while the deciders race.
    calls = round_calls(stack, "kill", keys)
    await client.register_session("s-kill", str(stack.untrusted))
    await park(client, calls)
    stop = asyncio.Event()
    chaos = asyncio.create_task(kill_workers_meanwhile(stack, stop, rng))
    try:
        _, forger = await asyncio.gather(storm(stack, client, calls), forge_storm(stack, calls))
    finally:
        stop.set()
        kills = await chaos
    assert kills, "no worker was killed while the deciders raced"
    faults += kills
    events = await finish(client, calls)
    verdicts.append(check_storm(calls, events))
    forged = forged_winners(forger, calls, events)
    all_calls += calls
    print(f"\nround kill: {verdicts[-1].mismatches[:10]}")
    for report in (r for c in calls for r in c.stuck):
        print(report)

    # Round 2: the store goes down while the deciders race.
    calls = round_calls(stack, "store", keys)
    await client.register_session("s-store", str(stack.untrusted))
    await park(client, calls)
    # (The private cluster commits synchronously: the crash-stop below loses
    # none of the parked rows; tests/faults/harness/postgres.py.)
    outage = asyncio.create_task(private_pg.outage(OUTAGE_SECONDS))
    await asyncio.sleep(0.5)
    await storm(stack, client, calls)
    await outage
    faults += 1
    verdicts.append(check_storm(calls, await finish(client, calls)))
    all_calls += calls
    await client.aclose()

    audit = await stack.acli("audit", "verify", "--against-temporal")
    raced = sum(v.raced for v in verdicts)
    mismatches = [m for v in verdicts for m in v.mismatches]
    summary.add(
        calls_run=len(all_calls),
        faults_injected=faults,
        server_errors=len(client.errors.unexpected),
        decisions_raced=raced,
        decision_mismatches=len(mismatches) + (audit.returncode != 0),
    )
    print(
        f"\ndecision-storm: calls={len(all_calls)} decisions={raced} worker-kills={faults - 1} "
        f"won-on-retry={sum(v.won_on_retry for v in verdicts)} "
        f"outcome-unknown={sum(v.outcome_unknown for v in verdicts)} "
        f"decided={[c.final.get('decision') if c.final else None for c in all_calls]}"
    )
    refused = [a for a in forger.attempts if a.kind == "update"]
    print(f"forged updates refused: {sum(a.answer.startswith('refused') for a in refused)}"
          f" of {len(refused)}; forged signals: {len(forger.attempts) - len(refused)}")
    assert not forged, "\n".join(forged[:20])
    stuck = [report for c in all_calls for report in c.stuck]
    assert not mismatches, (
        "\n".join(mismatches[:20]) + f"\naudit verify: {audit.stdout}\n{audit.stderr}\n"
        + "\n".join(stuck[:3]) + "\n" + stack.logs()
    )
    assert audit.returncode == 0, f"audit verify: {audit.stdout}\n{audit.stderr}"
    assert "match Temporal" in audit.stdout, audit.stdout
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )
