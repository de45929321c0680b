"""LateOutcomeWorkflow: a client's report that came after its call ended
(outcome_unknown, or cancelled while its claimer ran it).

The call's workflow has closed (its result, outcome_unknown, was delivered); a
late report is still recorded, visibly late, beside it: tool.outcome_late with
the report, never a change of the call's status or result. One per call
(workflow id `late/{session_id}/{tool_use_id}`): the first late report stands.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import proof
    from parkgate.calls.events import ToolEvent
    from parkgate.calls.records import CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.client_payloads import (
        LATE_OUTCOME_WORKFLOW,
        ClientOutcomeRecord,
        LateOutcomeInput,
        LateOutcomeResult,
        OutcomeResult,
    )
    from parkgate.models import SideEffects


#: workflow.patched id: the report's proof is checked by the client_outcome
#: activity (ClientOutcomeRecord.check_proof), not by this workflow's code.
PATCH_LATE_PROOF_IN_ACTIVITY = "late-outcome-proof-in-activity-v1"


def _refuse(unproven: str | None) -> None:
    """Fail this run when the report is not proven (the id may be used again by
    a proven report)."""
    if unproven is not None:
        raise ApplicationError(f"outcome refused: {unproven}", type="Unproven",
                               non_retryable=True)


@workflow.defn(name=LATE_OUTCOME_WORKFLOW)
class LateOutcomeWorkflow:
    """Record one late report (a committed activity), return what was recorded."""

    @workflow.run
    async def run(self, inp: LateOutcomeInput) -> LateOutcomeResult:
        ref, report = inp.ref, inp.report
        # Only parkgate's API may report (issue 28): the report carries its
        # proof for this workflow's id; anything else records nothing. The
        # activity checks it (PATCH_LATE_PROOF_IN_ACTIVITY): its verdict is in
        # history, so a worker with other keys replays the same path.
        checked_there = workflow.patched(PATCH_LATE_PROOF_IN_ACTIVITY)
        if not checked_there:
            # LEGACY: runs from before the patch replay with the keys they ran under.
            _refuse(proof.problem(report, proof.KIND_OUTCOME, workflow.info().workflow_id))
        status = inp.status or CallStatus.OUTCOME_UNKNOWN
        event = ToolEvent(
            type="tool.outcome_late", session_id=ref.session_id, turn_id=ref.turn_id or "",
            tool_use_id=ref.tool_use_id, tool_name=ref.tool_name or "", at=workflow.now(),
            side_effects=SideEffects(inp.side_effects) if inp.side_effects else None,
            data={"is_error": report.is_error, "input_sha256": report.input_sha256,
                  "reported_by": report.reported_by, "reported_by_name": report.reported_by_name,
                  "status": status.value},
        )
        stored = await workflow.execute_activity(
            acts.client_outcome,
            ClientOutcomeRecord(ref=ref, report=report, events=[event],
                                finished_at=workflow.now(), late=True,
                                check_proof=checked_there),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        _refuse(stored.unproven)
        return LateOutcomeResult(
            outcome=OutcomeResult(status=status, late=True, result=stored.result,
                                  message=f"recorded late: the call stays {status.value}"),
            report=report,
        )
