"""Drive planned calls through the agent API the way an agent and a human would."""

from __future__ import annotations

import asyncio
import time

from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall


async def drive(client: AgentClient, call: PlannedCall, *, timeout: float) -> None:
    """Submit, (if it parks) wait for the park and decide, then wait for the end.

    Never raises for a slow or failed call: whatever happened is left in
    `call.final` / `call.history` for the checks. Timeouts leave `final` unset
    (a lost call).
    """
    deadline = time.monotonic() + timeout
    try:
        res = await client.submit(call.session_id, call.turn_id, call.block(),
                                  timeout=timeout)
        call.history.append(str(res.get("status")))
        if call.parks:
            res = await client.wait_status(
                call.session_id, call.tool_use_id, {"parked"},
                timeout=deadline - time.monotonic(),
            )
            call.history.append(str(res.get("status")))
            if res.get("status") == "parked":
                await decide(client, call, res, deadline)
        call.final = await client.wait_status(
            call.session_id, call.tool_use_id, TERMINAL, timeout=deadline - time.monotonic()
        )
        call.history.append(str(call.final.get("status")))
    except TimeoutError as exc:
        call.history.append(f"timeout: {exc}")
    except AssertionError as exc:
        call.history.append(f"error: {exc}")


async def decide(client: AgentClient, call: PlannedCall, parked: dict, deadline: float) -> None:
    """The human's part: approve, deny (with a reason) or cancel the parked call."""
    if call.kind == "cancel":
        await client.cancel(call.session_id, call.tool_use_id, timeout=deadline - time.monotonic())
        return
    request_id = await client.request_id(call.session_id, parked)
    decision = "allow" if call.kind == "approve" else "deny"
    await client.decide(
        call.session_id, call.turn_id, request_id, decision,
        reason="" if decision == "allow" else "fault suite says no",
        timeout=deadline - time.monotonic(),
        # Under chaos a parked call may briefly be shown before its request is
        # stored; that inconsistency has its own test (test_parked_is_decidable).
        not_found_grace=30.0,
    )


async def drive_all(
    client: AgentClient, calls: list[PlannedCall], *, timeout: float, concurrency: int = 32
) -> None:
    """Drive every call, at most `concurrency` agents at once, all within `timeout` s
    (one shared deadline, so a few stuck calls cannot stretch the scenario)."""
    gate = asyncio.Semaphore(concurrency)
    deadline = time.monotonic() + timeout

    async def one(call: PlannedCall) -> None:
        async with gate:
            await drive(client, call, timeout=max(1.0, deadline - time.monotonic()))

    await asyncio.gather(*(one(c) for c in calls))
