"""Parking of ToolCallWorkflow: the approval request, the wait, the resolution.

The call parks (create_approval), starts its notices, then waits for a decision
(Decisions) or its expiry. The resolution (tool.confirmation_resolved, the call
row and the approval row as decided) travels with the next committed write
(PATCH_COMMITTED_WRITES), or is written at once in older histories.
`Parking` is built with the call's state, its recording part and its
notices (the only other part it calls); the expiry wait is the one a
sub-call's approval waits too (approval_wait.py). Deterministic code only.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

from parkgate.workflows.approval_wait import wait_for_decision
from parkgate.workflows.call_record import PATCH_REMINDERS, STORE_RETRY, STORE_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals.decisions import DecisionRecord
    from parkgate.calls.records import CallFacts, CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import ApprovalRequest, ExecPlan, RecordInput
    from parkgate.verdicts import ApprovalInfo

if TYPE_CHECKING:
    from parkgate.workflows.call_notices import Notices
    from parkgate.workflows.call_record import CallRecording
    from parkgate.workflows.call_state import CallState


class Parking:
    """ToolCallWorkflow's part that parks for a human and records what was decided."""

    def __init__(self, state: CallState, rec: CallRecording, notices: Notices) -> None:
        self.state = state
        self.rec = rec
        self.notices = notices

    def cancelled_while_parked(self) -> None:
        """A cancellation ends the wait: no decision can be accepted any more; a
        decision accepted before it is recorded with the cancellation."""
        if self.state.decision is not None and self.state.unwritten_resolution is None:
            self.state.unwritten_resolution = self._resolution(self.state.decision.decision)
        self.state.status = CallStatus.CANCELLED

    async def park(self, info: ApprovalInfo, plan: ExecPlan) -> DecisionRecord | None:
        """Create the approval request, notify, then wait for a decision or expiry."""
        now = workflow.now()
        expires_at = now + timedelta(seconds=plan.expiry_seconds) if plan.expiry_seconds else None
        # Decidable from here on (the request id is known; a decision that
        # arrives while the request is being stored is applied after it), but
        # reported as parked only once the request and its link exist, so
        # `parked` always comes with an approval_url a human can use.
        info_ = workflow.info()
        created = await self.rec.shielded(workflow.execute_activity(
            acts.create_approval,
            ApprovalRequest(
                info=info,
                session=self.state.input.session,
                # As classified: the parked row shows the input that would run.
                call=self.state.prepared.call if self.state.prepared else self.state.input.call,
                requested_at=now,
                expires_at=expires_at,
                workflow_id=info_.workflow_id,
                run_id=info_.run_id,
                ref=self.rec.ref(),
            ),
            start_to_close_timeout=STORE_TIMEOUT,
            retry_policy=STORE_RETRY,
        ))
        self.state.approval = created.approval
        self.state.approval_url = created.approval_url
        self.state.status = CallStatus.PARKED
        # Asked right after a regular activity's result (never after a local
        # one: docs/DURABLE.md), so a replay sees the marker in the same task.
        self.rec.proofs_on_signals()
        self.rec.decide_signals_retired()
        # A cancel that arrived while the request was stored ends the call now
        # (through run()'s cancellation path, which records `cancelled`).
        self.rec.raise_if_cancelled()
        if created.notify:
            # Decided here, right after a (non-local) activity result, where replay
            # sees the same marker (docs/DURABLE.md); only calls that notify pay it.
            self.state.cancel_notify_on_end = workflow.patched("cancel-notify-on-end")
            self.state.background.append(asyncio.create_task(self.notices.notify(created)))
            # Only rules with reminder/escalation timers ask (older histories never do).
            timed = info.remind_after_seconds or info.escalate_after_seconds
            if timed and workflow.patched(PATCH_REMINDERS):
                self.state.background.append(asyncio.create_task(self.notices.remind(created, now)))
        if created.slack:
            # Only histories whose create_approval said `slack` reach this (the
            # field did not exist before), so older histories replay unchanged.
            self.state.slack = True
            self.state.background.append(asyncio.create_task(self.notices.slack_post(created)))
        if not await wait_for_decision(lambda: self.state.decision is not None, expires_at):
            # An update accepted before the expiry fired is still applied
            # (e.g. revalidating edits): it wins over the expiry, or fails alone.
            await workflow.wait_condition(
                lambda: self.state.decision is not None or self.state.pending_decisions == 0
            )
            if self.state.decision is None:
                self.state.status = CallStatus.EXPIRED  # rejects every later decision
                if self.rec.uses_committed_writes():
                    self.state.unwritten_resolution = self._resolution(
                        "expired", reason="no decision before expiry"
                    )
                else:
                    await self._resolved("expired", reason="no decision before expiry")
                return None
        decision = self.state.decision
        assert decision is not None
        if self.rec.uses_committed_writes():
            # Written by the next committed write (execute, or the deny record),
            # never from this workflow task, which Temporal may still discard.
            self.state.unwritten_resolution = self._resolution(decision.decision)
            if decision.decision == "deny":
                self.state.status = CallStatus.DENIED
        else:
            await self._resolved(decision.decision)
        return decision

    async def _resolved(self, decision: str, *, reason: str | None = None) -> None:
        """Record tool.confirmation_resolved, the call row and the approval row
        (histories from before PATCH_COMMITTED_WRITES: a local activity)."""
        res = self._resolution(decision, reason=reason, light=False)
        await self.rec.record_raw(res.events, res.facts, res.approval)

    def _resolution(
        self, decision: str, *, reason: str | None = None, light: bool = True
    ) -> RecordInput:
        """tool.confirmation_resolved, the call row and the approval row as decided.

        `light`: the approval carries its decision only, not the request's `info`
        (diff, summary): the resolution travels in history as an activity input.
        """
        rec = self.state.decision
        if rec is None:
            self.state.status = CallStatus.EXPIRED
        data: dict[str, Any] = {
            "decision": decision,
            "decided_by": rec.decided_by if rec else None,
            "via": rec.via if rec else None,
            "reason": rec.reason if rec else reason,
            **self._principal_fields(rec),
        }
        approval = self.state.approval
        if approval is not None:
            approval = approval.model_copy(
                update={**data, "decided_at": rec.decided_at if rec else workflow.now()}
            )
            self.state.approval = approval
        status = {
            "deny": CallStatus.DENIED,
            "expired": CallStatus.EXPIRED,
        }.get(decision, CallStatus.RUNNING)
        event = self.rec.event(
            "tool.confirmation_resolved",
            request_id=self.rec.request_id(),
            data={k: v for k, v in data.items() if v is not None},
        )
        if light and approval is not None:
            approval = approval.model_copy(update={"info": {}})
        edited = rec is not None and decision == "allow_with_edits"
        remember = rec.remember if rec is not None and decision != "deny" else None
        prepared = self.state.prepared
        return RecordInput(
            approval_decision_only=light,
            events=[event],
            # The decision's columns come from `approval`; an edit changes the input.
            facts=CallFacts(
                ref=self.rec.ref(),
                status=status,
                request_id=self.rec.request_id(),
                input=prepared.call.input if prepared and (edited or remember) else None,
                input_hash=rec.approved_hash if edited and rec else None,
            ),
            approval=approval,
            remember=remember,
        )

    def _principal_fields(self, rec: DecisionRecord | None) -> dict[str, Any]:
        """Who decided, beside `decided_by`: only the fields that are set (so a
        call decided without them records exactly what it did before)."""
        if rec is None:
            return {"votes": list(self.state.votes)} if self.state.votes else {}
        fields = rec.approval_fields()  # as the approval row holds them
        who = ("principal_id", "claimed_name", "self_approved", "identity", "votes")
        return {k: fields[k] for k in who if fields[k] is not None}
