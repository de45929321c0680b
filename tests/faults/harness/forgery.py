"""Forged decisions during a decision storm: a tool that reached the Temporal
frontend sends the `decide` update and signal for every parked call, in every
shape it can make (tests/fixtures/forger.py), while the humans race."""

from __future__ import annotations

import asyncio

from parkgate.durable.payloads import call_workflow_id
from tests.faults.harness.stack import Stack
from tests.faults.harness.storm import StormCall, who
from tests.fixtures.forger import FORGED_NAMES, Forger


async def forge_storm(stack: Stack, calls: list[StormCall], rounds: int = 2) -> Forger:
    """`rounds` passes of every forged shape (allow and deny) at every call, the
    calls in parallel; returns the forger with what Temporal answered."""
    forger = await Forger.connect(stack.temporal_address)

    async def one(call: StormCall) -> None:
        wf = call_workflow_id(call.session_id, call.tool_use_id)
        for i in range(rounds):
            await forger.forge_all(wf, call.request_id, decision=("allow", "deny")[i % 2],
                                   decided_by=FORGED_NAMES[i % len(FORGED_NAMES)])

    await asyncio.gather(*(one(c) for c in calls))
    return forger


def forged_winners(forger: Forger, calls: list[StormCall],
                   events: dict[str, list[dict]]) -> list[str]:
    """Every trace of a forgery that got through: an accepted forged update, a
    call whose recorded decider is a forged name, an event naming one."""
    found = [f"accepted forged update: {a}" for a in forger.accepted()]
    for call in calls:
        final = call.final or {}
        if who(final) in FORGED_NAMES or final.get("principal_id") == "key:admin":
            found.append(f"{call.tool_use_id}: recorded decider {who(final)}")
        for event in events.get(call.tool_use_id, []):
            data = event.get("data") or {}
            if who(data) in FORGED_NAMES:
                found.append(f"{call.tool_use_id}: event {event.get('type')} names {who(data)}")
    return found
