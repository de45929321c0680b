"""Decisions of ToolCallWorkflow: the decide update and signal, quorum votes.

`Decisions` is built with the call's state and its recording part; the
workflow's `decide` update, its validator and the retired `decide` signal
are methods of ToolCallWorkflow that hand their input to it (`decide`,
`validate`, `decide_signal`). The validator and the pure problem checks run
without I/O (validators do not run on replay); accepted decisions are
applied under a lock (PATCH_COMMITTED_WRITES) and may revalidate edited
input in an activity. With named approvers a vote decides only when the
quorum is reached (parkgate.approvals.quorum). What a sub-call's approval
refuses alike (unproven, the winner in the rejection) is approval_wait.py's.
Deterministic code only.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from temporalio import workflow

from parkgate.workflows.approval_wait import proof_problem, rejected
from parkgate.workflows.call_record import (
    LOCAL_RETRY,
    LOCAL_TIMEOUT,
    PATCH_COMMITTED_WRITES,
)

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import quorum
    from parkgate.approvals.decisions import (
        DECISIONS,
        DecideInput,
        DecisionRecord,
        Rejection,
        RejectReason,
        already_decided,
        invalid_decision,
        invalid_edits,
        no_longer_waiting,
    )
    from parkgate.calls.records import CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import DecideResult, RevalidateInput, RevalidateOutput
    from parkgate.rules.remember_spec import remember_for
    from parkgate.schema import validate_input
    from parkgate.verdicts import PreparedCall

if TYPE_CHECKING:
    from parkgate.workflows.call_record import CallRecording
    from parkgate.workflows.call_state import CallState


#: workflow.patched id: an approver's edits are re-scoped by a regular activity,
#: not a local one (`Decisions._revalidate`).
PATCH_REVALIDATE_ACTIVITY = "revalidate-edits-as-activity"


def lexical_path_errors(prepared: PreparedCall, new_input: dict[str, object]) -> list[str]:
    """Pure (no filesystem) scope check of edited paths, for the update validator.

    The full re-scope (symlinks, realpath) runs in the revalidate activity.
    """
    root = posixpath.normpath(prepared.session.workspace_path)
    errors = []
    for field in prepared.definition.path_fields:
        value = new_input.get(field)
        if not isinstance(value, str):
            continue
        joined = posixpath.normpath(posixpath.join(root, value))
        if joined != root and not joined.startswith(root.rstrip("/") + "/"):
            errors.append(f"{field}: path {value!r} escapes the workspace")
    return errors


class Decisions:
    """ToolCallWorkflow's part that accepts, refuses and counts decisions."""

    def __init__(self, state: CallState, rec: CallRecording) -> None:
        self.state = state
        self.rec = rec

    def _decide_problem(self, inp: DecideInput) -> Rejection | None:
        """Why this decision cannot be applied (None when it can); pure."""
        info = self.state.info
        if info is None or inp.request_id != info.request_id:
            return Rejection(RejectReason.UNKNOWN_REQUEST,
                             f"unknown request id {inp.request_id!r} for this call")
        if self.state.decision is not None:
            return already_decided(self.state.decision.decision, self.state.decision.decided_by)
        storing = self.state.status == CallStatus.QUEUED and self.state.approval is None
        if self.state.status != CallStatus.PARKED and not storing:
            return no_longer_waiting(self.state.status.value)
        if inp.decision not in DECISIONS:
            return invalid_decision(inp.decision)
        if inp.decision == "allow_with_edits":
            prepared = self.state.prepared
            assert prepared is not None
            if inp.edited_input is None:
                return Rejection(
                    RejectReason.EDITS_MISSING,
                    "allow_with_edits needs edited_input (the complete replacement input)",
                )
            errors = validate_input(prepared.definition.input_schema, inp.edited_input)
            errors += lexical_path_errors(prepared, inp.edited_input)
            if errors:
                return invalid_edits("; ".join(errors))
        elif inp.edited_input is not None:
            return Rejection(RejectReason.EDITS_NOT_ALLOWED,
                             "edited_input is only allowed with allow_with_edits")
        return self._vote_problem(inp)

    async def decide(self, inp: DecideInput) -> DecideResult:
        """The `decide` update: apply a decision; the first one wins and every
        later caller learns it."""
        return await self._decide_accepted(inp)

    def validate(self, inp: DecideInput) -> None:
        """The `decide` update's validator (never replayed: it may read the keys)."""
        # The proof first: an unproven caller learns nothing of the call.
        unproven_ = proof_problem(inp)
        if unproven_ is not None:
            raise rejected(unproven_, None)
        problem = self._decide_problem(inp)
        if problem is not None:
            # The standing winner travels with the rejection: the loser learns
            # it without a status query (which may not be answered in time).
            raise rejected(problem, self.state.decision)

    async def decide_signal(self, inp: DecideInput) -> None:
        """The `decide` signal, retired (PATCH_DECIDE_SIGNAL_RETIRED): logged and ignored.

        Signal handlers run again on replay, so a proof checked here answers
        with the replaying worker's keys (issue 37). Histories from before the
        patch replay the old branch: invalid or unproven decisions ignored,
        checked with the keys they ran under (LEGACY).
        """
        if not self.rec.decide_signals_retired():
            await self._decide_signal_legacy(inp)
            return
        workflow.logger.warning("decide signal ignored: decisions are sent as the decide update")

    async def _decide_signal_legacy(self, inp: DecideInput) -> None:
        """The signal as histories from before PATCH_DECIDE_SIGNAL_RETIRED took it."""
        if self.rec.proofs_on_signals():
            unproven_ = proof_problem(inp)
            if unproven_ is not None:
                workflow.logger.warning("decide signal ignored: %s", unproven_.message)
                return
        problem = self._decide_problem(inp)
        if problem is not None:
            workflow.logger.warning("decide signal ignored: %s", problem.message)
            return
        await self._decide_accepted(inp)

    async def _decide_accepted(self, inp: DecideInput) -> DecideResult:
        """An accepted decide (update or signal): counted while in flight, so an
        expiry firing meanwhile waits for it instead of winning against it."""
        self.state.pending_decisions += 1
        try:
            if workflow.patched(PATCH_COMMITTED_WRITES):
                async with self.state.decide_lock:
                    return await self._apply_decision_locked(inp)
            return await self._apply_decision(inp)
        finally:
            self.state.pending_decisions -= 1

    async def _apply_decision_locked(self, inp: DecideInput) -> DecideResult:
        """Apply one decision while holding the decide lock.

        State is re-checked on entry (a rival may have won while we waited for
        the lock) and again after revalidation (the only await: an expiry or a
        cancellation may have ended the wait meanwhile).
        """
        problem = self._decide_problem(inp)
        if problem is not None:
            return self._refused(problem)
        prepared = self.state.prepared
        assert prepared is not None
        if inp.decision == "allow_with_edits":
            checked = await self._revalidate(prepared, inp)
            problem = self._decide_problem(inp)
            if problem is not None:
                return self._refused(problem)
            if checked.prepared is None:
                return self._refused(invalid_edits(str(checked.error)), winner=False)
            prepared = checked.prepared
            self.state.prepared = prepared
        return self._settled(inp, prepared)

    async def _revalidate(self, prepared: PreparedCall, inp: DecideInput) -> RevalidateOutput:
        """Full re-scope of edited input (pure: no store writes, safe to discard).

        A regular activity (PATCH_REVALIDATE_ACTIVITY): a local one inside an
        update handler can see its result land in the workflow task after the
        one that recorded its marker, with another decision accepted in
        between; a worker replaying that history (a cold start, a query on an
        ended call) then completes this update before that acceptance and
        fails with "UpdateMachine ... invalid during event
        WorkflowExecutionUpdateAccepted": the call wedged (docs/FAULTS.md,
        finding 13). Histories from before the patch replay their local one.
        """
        assert inp.edited_input is not None
        checked = RevalidateInput(prepared=prepared, new_input=inp.edited_input)
        queue = self.rec.group_queue()
        if queue is not None or workflow.patched(PATCH_REVALIDATE_ACTIVITY):
            # Re-scoping (realpath) needs the workspace: on the group's hosts.
            return await workflow.execute_activity(
                acts.revalidate,
                checked,
                task_queue=queue,
                start_to_close_timeout=LOCAL_TIMEOUT,
                retry_policy=LOCAL_RETRY,
            )
        return await workflow.execute_local_activity(
            acts.revalidate,
            checked,
            start_to_close_timeout=LOCAL_TIMEOUT,
            retry_policy=LOCAL_RETRY,
        )

    def _settled(self, inp: DecideInput, prepared: PreparedCall) -> DecideResult:
        """Count `inp` (pure: no command): the decision when it decides, else a
        quorum vote that does not decide yet."""
        self.state.decision = self._tally(self._decision_record(inp, prepared), inp)
        if self.state.decision is None:
            return self._counted()
        return DecideResult(accepted=True, winner=self.state.decision, message="decision applied")

    def _decision_record(self, inp: DecideInput, prepared: PreparedCall) -> DecisionRecord:
        """The winning decision as recorded."""
        info = self.state.info
        return inp.record(
            decided_at=workflow.now(),
            approved_hash=prepared.input_hash if inp.decision != "deny" else None,
            # Data only (no command): written as a rule with the committed decision.
            remember=(
                remember_for(inp.remember, inp.approver, info)
                if inp.decision != "deny" else None
            ),
        )

    async def _apply_decision(self, inp: DecideInput) -> DecideResult:
        """Histories from before PATCH_COMMITTED_WRITES (kept as they ran)."""
        # A rival accepted just before us may still be revalidating its edits.
        await workflow.wait_condition(lambda: not self.state.deciding)
        problem = self._decide_problem(inp)
        if problem is not None:
            return self._refused(problem)
        prepared = self.state.prepared
        assert prepared is not None
        self.state.deciding = True
        try:
            if inp.decision == "allow_with_edits":
                checked = await self._revalidate(prepared, inp)
                if checked.prepared is None:
                    return self._refused(invalid_edits(str(checked.error)), winner=False)
                prepared = checked.prepared
                self.state.prepared = prepared
            return self._settled(inp, prepared)
        finally:
            self.state.deciding = False

    # ------------------------------------------------ named approvers, quorum
    def _refused(self, problem: Rejection, *, winner: bool = True) -> DecideResult:
        """A decision refused inside the handler (after the validator let it in)."""
        return DecideResult.refused(problem, self.state.decision if winner else None)

    def _vote_problem(self, inp: DecideInput) -> Rejection | None:
        """Why this vote cannot count on a request with named approvers; pure."""
        info = self.state.info
        if info is None:
            return None
        return quorum.vote_problem(
            info.approvers, info.quorum, self.state.votes, inp.approver, inp.decision
        )

    def _tally(self, record: DecisionRecord, inp: DecideInput) -> DecisionRecord | None:
        """Count a vote: the decision when it decides the request, else None.

        Without named approvers the first decision decides (as always); with
        them, the quorum's last allow or any deny decides. Votes arrive as
        updates or signals, so a replay recounts them identically.
        """
        info = self.state.info
        assert info is not None
        self.state.votes = quorum.count(self.state.votes, inp.approver, inp.decision)
        if not quorum.decides(info.approvers, info.quorum, self.state.votes, inp.decision):
            return None
        if info.approvers:
            return record.model_copy(update={"votes": list(self.state.votes)})
        return record

    def _counted(self) -> DecideResult:
        info = self.state.info
        assert info is not None
        return DecideResult(
            accepted=True,
            message=f"approval {len(self.state.votes)} of {info.quorum} recorded; "
            "the call waits for the others",
            votes=list(self.state.votes),
            quorum=info.quorum,
        )
