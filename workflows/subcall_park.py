"""SubCallApprovalWorkflow: the durable wait for a human on one composed sub-call.

Started by ToolCallWorkflow as a child when its composed tool stopped at a
sub-call that needs approval (ExecuteOutput.parked). Its id is the sub-call's
own call id, so the API decides it exactly as it decides a call: the proven
`decide` update to `call/{session}/{parent}.{n}` (the signal is retired). It stores the
request (parkgate.create_approval), notifies, then waits on a durable timer
for a decision or the expiry: whichever the workflow commits first wins, and
every later caller is told the truth (already decided / no longer waiting:
expired). The resolution is stored by a regular activity, after the workflow
task that decided it committed. A worker lost meanwhile loses nothing.
The wait and the refusals are a parked call's (approval_wait.py), and so are
the notice's timeouts and retries (call_notices.py). Deterministic code only.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from parkgate.workflows.approval_wait import proof_problem, rejected, wait_for_decision
from parkgate.workflows.call_notices import NOTIFY_RETRY, NOTIFY_SCHEDULE_TO_CLOSE
from parkgate.workflows.call_record import (
    PATCH_DECIDE_SIGNAL_RETIRED,
    STORE_RETRY,
    STORE_TIMEOUT,
)

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals.decisions import DecideInput, DecisionRecord, Rejection
    from parkgate.calls.events import ToolEvent
    from parkgate.calls.records import ApprovalRecord, CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable import subcall_approvals, workflow_defn
    from parkgate.durable.payloads import (
        QUERY_STATUS,
        SIGNAL_DECIDE,
        SUBCALL_WORKFLOW,
        UPDATE_DECIDE,
        ApprovalRequest,
        CallStatusView,
        DecideResult,
        NotifyInput,
        RecordInput,
        StatusRequest,
        SubCallApprovalInput,
        SubCallDecided,
    )

@workflow_defn.defn(name=SUBCALL_WORKFLOW)
class SubCallApprovalWorkflow:
    """One sub-call's approval request, from stored to decided, expired or cancelled."""

    @workflow.init
    def __init__(self, inp: SubCallApprovalInput) -> None:
        self._inp = inp
        self._status = CallStatus.QUEUED
        self._approval: ApprovalRecord | None = None
        self._decision: DecisionRecord | None = None
        #: PATCH_DECIDE_SIGNAL_RETIRED, asked in the first activation (run).
        self._retired_signals: bool | None = None

    def _decide_signals_retired(self) -> bool:
        if self._retired_signals is None:
            self._retired_signals = workflow.patched(PATCH_DECIDE_SIGNAL_RETIRED)
        return self._retired_signals

    @workflow.run
    async def run(self, inp: SubCallApprovalInput) -> SubCallDecided:
        sub, info = inp.sub, inp.sub.info
        self._decide_signals_retired()
        now = workflow.now()
        expires_at = now + timedelta(seconds=inp.expiry_seconds) if inp.expiry_seconds else None
        wf = workflow.info()
        notify: asyncio.Task[None] | None = None
        try:
            created = await workflow.execute_activity(
                acts.create_approval,
                ApprovalRequest(
                    info=info, session=sub.prepared.session, call=sub.prepared.call,
                    requested_at=now, expires_at=expires_at,
                    workflow_id=wf.workflow_id, run_id=wf.run_id,
                ),
                start_to_close_timeout=STORE_TIMEOUT,
                retry_policy=STORE_RETRY,
            )
            self._approval = created.approval
            self._status = CallStatus.PARKED
            if created.notify:
                notify = asyncio.create_task(self._notify(created.approval))
            await wait_for_decision(lambda: self._decision is not None, expires_at)
        except asyncio.CancelledError:
            # The composed call was cancelled: nobody would act on a decision.
            self._status = CallStatus.CANCELLED
            if self._approval is not None:
                await self._record("cancelled", None)
            return self._decided("cancelled")
        finally:
            if notify is not None and not notify.done():
                notify.cancel()
        decision = self._decision
        if decision is None:  # the expiry was committed first: later decisions are refused
            self._status = CallStatus.EXPIRED
            await self._record(subcall_approvals.EXPIRED, "no decision before expiry")
            return self._decided(subcall_approvals.EXPIRED, "no decision before expiry")
        self._status = CallStatus.DENIED if decision.decision == "deny" else CallStatus.RUNNING
        await self._record(decision.decision, decision.reason)
        return self._decided(decision.decision, decision.reason)

    def _decided(self, decision: str, reason: str | None = None) -> SubCallDecided:
        return SubCallDecided(
            request_id=self._inp.sub.info.request_id, decision=decision, reason=reason,
            input_hash=self._inp.sub.prepared.input_hash,
        )

    async def _notify(self, approval: ApprovalRecord) -> None:
        """The webhook/e-mail notice; a failure never blocks the sub-call."""
        notice = NotifyInput(info=self._inp.sub.info, session=self._inp.sub.prepared.session,
                             requested_at=approval.requested_at, expires_at=approval.expires_at)
        try:
            await workflow.execute_activity(
                acts.notify, notice,
                schedule_to_close_timeout=NOTIFY_SCHEDULE_TO_CLOSE, retry_policy=NOTIFY_RETRY,
            )
        except ActivityError as exc:
            workflow.logger.warning("sub-call notify failed: %s", exc.cause)

    async def _record(self, decision: str, reason: str | None) -> None:
        """tool.confirmation_resolved and the approval row as decided (first write
        wins in the store; nothing else decides sub-call requests there)."""
        rec, sub = self._decision, self._inp.sub
        data: dict[str, Any] = {
            "decision": decision,
            "decided_by": rec.decided_by if rec else None,
            "via": rec.via if rec else ("expiry" if decision == subcall_approvals.EXPIRED
                                        else None),
            "reason": reason,
        }
        if rec is not None and rec.identity is not None:
            data |= {"principal_id": rec.principal_id, "identity": rec.identity}
        prepared = sub.prepared
        event = ToolEvent(
            type="tool.confirmation_resolved",
            session_id=prepared.session.session_id,
            turn_id=prepared.session.turn_id,
            tool_use_id=prepared.call.id,
            tool_name=prepared.call.name,
            side_effects=prepared.definition.side_effects,
            parent_tool_use_id=prepared.parent_tool_use_id,
            at=workflow.now(),
            request_id=sub.info.request_id,
            data={k: v for k, v in data.items() if v is not None},
        )
        approval = None
        if decision != "cancelled" and self._approval is not None:
            fields = rec.approval_fields() if rec is not None else {
                "decision": decision, "via": data["via"], "reason": reason,
                "decided_at": workflow.now(),
            }
            approval = self._approval.model_copy(update={**fields, "info": {}})
        await workflow.execute_activity(
            acts.record_committed,
            RecordInput(events=[event], approval=approval, approval_decision_only=True),
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        )

    # ------------------------------------------------------------ decisions
    def _problem(self, inp: DecideInput) -> Rejection | None:
        """Why `inp` cannot be applied now; pure state (the handler's re-check:
        an accepted update passed the validator's proof check)."""
        return subcall_approvals.problem(
            self._inp.sub.info, self._status.value, self._decision, inp
        )

    @workflow.update(name=UPDATE_DECIDE)
    async def decide(self, inp: DecideInput) -> DecideResult:
        """The first decision wins (before the expiry); later ones learn the winner."""
        return self._apply(inp)

    def _apply(self, inp: DecideInput) -> DecideResult:
        problem = self._problem(inp)  # re-checked: a rival or the expiry may have won
        if problem is not None:
            return DecideResult.refused(problem, self._decision)
        self._decision = inp.record(decided_at=workflow.now(), approved_hash=(
            self._inp.sub.prepared.input_hash if inp.decision == "allow" else None))
        return DecideResult(accepted=True, winner=self._decision, message="decision applied")

    @decide.validator
    def _validate_decide(self, inp: DecideInput) -> None:
        # Unproven or not, the standing winner travels with the refusal (a
        # parked call tells an unproven caller nothing: call_decide.py).
        problem = proof_problem(inp) or self._problem(inp)
        if problem is not None:
            raise rejected(problem, self._decision)

    @workflow.signal(name=SIGNAL_DECIDE)
    async def decide_signal(self, inp: DecideInput) -> None:
        """Retired (PATCH_DECIDE_SIGNAL_RETIRED, as for ToolCallWorkflow): logged
        and ignored; its proof check would replay with the replaying worker's keys."""
        if not self._decide_signals_retired():
            # LEGACY: runs that took a decide signal before the patch.
            problem = proof_problem(inp) or self._problem(inp)
            if problem is not None:
                workflow.logger.warning("decide signal ignored: %s", problem.message)
                return
            self._apply(inp)
            return
        workflow.logger.warning("decide signal ignored: decisions are sent as the decide update")

    @workflow.query(name=QUERY_STATUS)
    def status(self, _: StatusRequest) -> CallStatusView:
        """Where the request is now (the API's decide path asks before deciding)."""
        sub, approval = self._inp.sub, self._approval
        return CallStatusView(
            workflow_id=workflow.info().workflow_id,
            session_id=sub.prepared.session.session_id,
            tool_use_id=sub.prepared.call.id,
            tool_name=sub.prepared.call.name,
            status=self._status,
            request=sub.info,
            requested_at=approval.requested_at if approval else None,
            expires_at=approval.expires_at if approval else None,
            decision=self._decision,
        )
