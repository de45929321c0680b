"""What a parked call and a parked sub-call share: the wait, and refusing a decision.

ToolCallWorkflow (call_park.py, call_decide.py) and SubCallApprovalWorkflow
(subcall_park.py) both wait for a human until an approval request expires,
and both refuse a `decide` update the same way: unproven first (the worker's
proof keys, read only in validators and LEGACY branches: issue 37), then
with the standing winner, so a loser learns it without a status query. One
copy here keeps the two waits, and the errors their callers map, alike.
Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import proof
    from parkgate.approvals.decisions import (
        REJECTED_ERROR_TYPE,
        DecideInput,
        DecisionRecord,
        Rejection,
        unproven,
    )


async def wait_for_decision(decided: Callable[[], bool], expires_at: datetime | None) -> bool:
    """Wait until `decided()` or the request's expiry (a durable timer; none
    without an expiry): False when the expiry fired first.

    The expiry is a point in time: time spent storing the request counts, and
    a timer always waits at least a second."""
    timeout = max(expires_at - workflow.now(), timedelta(seconds=1)) if expires_at else None
    try:
        await workflow.wait_condition(decided, timeout=timeout, timeout_summary="approval expiry")
    except TimeoutError:
        return False
    return True


def proof_problem(inp: DecideInput) -> Rejection | None:
    """Why `inp` is not proven to come from parkgate's API: read with the
    worker's installed keys (parkgate.approvals.proof), so called only from an
    update validator (validators never replay) or a LEGACY signal branch."""
    text = proof.problem(inp, proof.KIND_DECIDE, workflow.info().workflow_id)
    return unproven(text) if text is not None else None


def rejected(problem: Rejection, winner: DecisionRecord | None) -> ApplicationError:
    """The error a `decide` validator raises: details (winner, reason); the
    reason is what interfaces map, the winner (None for an unproven caller,
    who learns nothing of the call) spares the loser a status query."""
    won = winner.model_dump(mode="json") if winner is not None else None
    return ApplicationError(
        problem.message, won, problem.reason.value,
        type=REJECTED_ERROR_TYPE, non_retryable=True,
    )
