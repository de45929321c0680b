"""A call resource that says `parked` (with a request id) must be decidable at
once and carry its approval_url: the approval request behind it has to exist
by then. Deciding right after
the park is what an eager human with the link open, or an auto-approver, does."""

from __future__ import annotations

import asyncio

import pytest

from tests.faults.conftest import StackFactory
from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL, AgentClient
from tests.faults.harness.calls import PlannedCall, check

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]


async def test_parked_is_decidable_immediately(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    await client.register_session("s-eager", str(stack.untrusted))
    calls = [PlannedCall("approve", "s-eager", "t1", f"tu_eager_{i}", stack.untrusted)
             for i in range(20)]
    refused: list[str] = []
    no_url: list[str] = []

    async def eager(c: PlannedCall) -> None:
        await client.submit(c.session_id, c.turn_id, c.block())
        parked = await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=60)
        assert parked.get("status") == "parked", parked
        if not parked.get("approval_url"):
            no_url.append(c.tool_use_id)
        rid = await client.request_id(c.session_id, parked)
        r = await client.decide(c.session_id, c.turn_id, rid, "allow", not_found_grace=30.0)
        if client.decide_not_found:
            refused.append(f"{c.tool_use_id}: {r.status_code}")
        c.final = await client.wait_status(c.session_id, c.tool_use_id, TERMINAL, timeout=60)

    await asyncio.gather(*(eager(c) for c in calls))
    await client.aclose()
    verdict = check(calls)
    summary.add(calls_run=len(calls), lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, verdict.problems()
    assert not no_url, f"`parked` without an approval_url: {no_url[:5]}"
    assert client.decide_not_found == 0, (
        f"{client.decide_not_found} decisions got 404 for a request id that a "
        f"`parked` call resource had already shown"
    )
    assert not client.errors.unexpected, (
        f"{client.errors.unexpected[:5]}\n{stack.api_tracebacks()}"
    )


async def test_cancel_right_after_parking_ends_cancelled(make_stack: StackFactory) -> None:
    """An agent that cancels a call the moment it shows `parked` gets `cancelled`
    — also when the approval request is still being stored."""
    stack = await make_stack(workers=1)
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    await client.register_session("s-cancel", str(stack.untrusted))
    calls = [PlannedCall("cancel", "s-cancel", "t1", f"tu_quick_cancel_{i}", stack.untrusted)
             for i in range(20)]

    async def eager(c: PlannedCall) -> None:
        await client.submit(c.session_id, c.turn_id, c.block())
        parked = await client.wait_status(c.session_id, c.tool_use_id, {"parked"}, timeout=60)
        assert parked.get("status") == "parked", parked
        await client.cancel(c.session_id, c.tool_use_id)
        try:
            c.final = await client.wait_status(c.session_id, c.tool_use_id, TERMINAL,
                                               timeout=30)
        except TimeoutError as exc:
            c.history.append(f"timeout: {exc}")

    await asyncio.gather(*(eager(c) for c in calls))
    await client.aclose()
    verdict = check(calls)
    summary.add(calls_run=len(calls), lost=len(verdict.lost),
                duplicate_executions=len(verdict.duplicates),
                server_errors=len(client.errors.unexpected))
    assert not verdict.lost and not verdict.duplicates and not verdict.wrong, verdict.problems()
