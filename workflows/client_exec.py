"""The client-executed half of ToolCallWorkflow: release, claim, outcome.

A client tool's call is classified and parked like any other; once approved
the workflow does not run an activity. It RELEASES the call (the input to
run and its `input_sha256`) and waits for one CLAIM (the first wins and gets
a lease on a durable timer) and one OUTCOME. No outcome before the lease
ends: the call ends `outcome_unknown`, never released again (a late report
is recorded by parkgate.LateOutcome). Deterministic code only.

Every store write here is a regular activity: scheduled only once the
workflow task that accepted the claim or report is committed, so the store
never records what Temporal may still discard.

`ClientExecution` is built with the call's state and its recording part; the
client path's updates (client_updates.py, `ClientUpdates`) receive it in
turn, for the claim records and the committed write they share.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import proof
    from parkgate.calls.events import make_event_id
    from parkgate.calls.records import CallFacts, CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.client_payloads import (
        UNCLAIMED_TEXT,
        ClaimInput,
        ClaimRecord,
        ClientOutcomeRecord,
        OutcomeInput,
        OutcomeResult,
        ReleaseView,
    )
    from parkgate.durable.payloads import CallOutcome, RecordInput
    from parkgate.models import (
        ToolErrorClass,
        input_sha256,
        legacy_input_sha256,
    )
    from parkgate.verdicts import PreparedCall

if TYPE_CHECKING:
    from parkgate.calls.events import ToolEvent
    from parkgate.workflows.call_record import CallRecording
    from parkgate.workflows.call_state import CallState

#: A store write from the client path: retried until the store answers.
WRITE_TIMEOUT = timedelta(seconds=10)
WRITE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)

#: workflow.patched id: a call started from here on is released with its RFC 8785
#: input_sha256 (parkgate.jcs); one started before keeps the json.dumps form.
#: Asked at the start of a call with a client tool (ToolCallWorkflow._run).
PATCH_JCS_INPUT_SHA256 = "jcs-input-sha256"

#: A claim is a reservation its holder starts before it runs the tool.
PATCH_CLAIM_RESERVATION = "claim-reservation"

OUTCOME_UNKNOWN_TEXT = (
    "The client claimed this call but reported no outcome before its lease ended; "
    "outcome unknown (it may have run). It will not be released again."
)


class ClientExecution:
    """ToolCallWorkflow's part for a client tool's call: release it, wait for its
    claim and outcome (the updates that bring them: client_updates.py)."""

    def __init__(self, state: CallState, rec: CallRecording) -> None:
        self.state = state
        self.rec = rec

    def is_client_call(self, prepared: PreparedCall) -> bool:
        """A call its client runs (only calls started with a client tool, which no
        history from before client tools has)."""
        return self.state.input.client_tool is not None and prepared.definition.client_executed

    # ---------------------------------------------------------------- path
    async def release_call(self, prepared: PreparedCall) -> CallOutcome:
        """Release the approved call, then wait for its claim and its outcome."""
        # Every write of this path is a committed (regular) activity.
        self.state.committed_writes = True
        call_input = prepared.call.input
        sha = input_sha256(call_input) if self.state.jcs_input_sha256 \
            else legacy_input_sha256(call_input)
        release = ReleaseView(input=call_input, input_sha256=sha, released_at=workflow.now())
        event = self.rec.event("tool.released", request_id=self.rec.request_id(), data={
            "input_sha256": release.input_sha256, "approval_hash": prepared.input_hash,
        })
        # Set before the write: a claim that reads the stored release before
        # this workflow sees the write done is accepted and waits for it.
        self.state.release = release
        at_release = self._claim_at_release()
        if at_release is not None:
            await self._release_claimed(prepared, release, event, at_release)
        else:
            await self.client_write(
                [event],
                CallFacts(ref=self.rec.ref(), status=CallStatus.RELEASED,
                          opening=self.rec.opening(), request_id=self.rec.request_id(),
                          input=call_input, input_hash=prepared.input_hash),
            )
            self.state.release_stored = True
            self.state.status = CallStatus.RELEASED
        claim: ClaimRecord | None
        if self.state.reserving:
            claim = await self._started_claim(release)
            if claim is None:
                return await self._unclaimed(release)
        else:
            if not await self._claimed_in_time(release):
                return await self._unclaimed(release)
            claim = self.state.claim
        assert claim is not None
        left = claim.lease_expires_at - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self.state.report is not None,
                timeout=max(left, timedelta(seconds=1)),
                timeout_summary="client lease",
            )
        except TimeoutError:
            if self.state.report is None:
                return await self._lease_expired(claim)
        report = self.state.report
        assert report is not None
        return await self._store_outcome(report, claim)

    async def _started_claim(self, release: ReleaseView) -> ClaimRecord | None:
        """Wait for a claim its holder starts (or reports on: an older client
        that runs without starting). A reservation taken over is waited on in
        its stead; one unstarted at its end lapses and the call is released
        again, for anyone to claim. None: no claim before the release's end
        (`unclaimed`, issue 37; a lapse does not extend it)."""
        while True:
            if not await self._claimed_in_time(release):
                return None
            claim = self.state.claim
            assert claim is not None
            if claim.started or self.state.report is not None:
                if claim.started and claim.claim_id is not None:
                    await workflow.wait_condition(lambda: self.state.start_stored)
                return self.state.claim if self.state.claim is not None else claim
            left = claim.lease_expires_at - workflow.now()
            try:
                await workflow.wait_condition(
                    lambda c=claim: self.state.claim is not c or self.state.report is not None,  # type: ignore[misc]
                    timeout=max(left, timedelta(seconds=1)),
                    timeout_summary="claim reservation",
                )
            except TimeoutError:
                if self.state.claim is claim and self.state.report is None:
                    await self._lapse(claim)
            # taken over, started (a new record), reported or lapsed: look again

    async def _lapse(self, claim: ClaimRecord) -> None:
        """An unstarted reservation ended: its holder never ran the call, which
        is released again (the row says released; a start of it is refused)."""
        self.state.claim = None
        self.state.claim_stored = False
        self.state.status = CallStatus.RELEASED
        self.state.lapses += 1
        self.state.lapsing = True
        call, session = self.state.input.call, self.state.input.session
        event = self.rec.event(
            "tool.claim_lapsed", request_id=self.rec.request_id(),
            event_id=make_event_id(session.session_id, call.id, "tool.claim_lapsed",
                                   self.state.lapses),
            data={"claimed_by": claim.claimed_by, "claim_id": claim.claim_id,
                  "claimed_at": claim.claimed_at.isoformat(),
                  "reserved_until": claim.lease_expires_at.isoformat()})
        try:
            await self.client_write([event], CallFacts(
                ref=self.rec.ref(), status=CallStatus.RELEASED, request_id=self.rec.request_id()))
        finally:
            self.state.lapsing = False

    def reservation(self, inp: ClaimInput, now: Any) -> ClaimRecord:
        """The claim `inp` gets: a reservation (patched, the API named it) or,
        as before, a run with its lease."""
        if self.state.reserving and inp.claim_id is not None:
            reserve = inp.reserve_seconds or inp.lease_seconds
            return ClaimRecord(claimed_by=inp.claimed_by, claimed_by_name=inp.claimed_by_name,
                               claimed_at=now, lease_expires_at=now + timedelta(seconds=reserve),
                               claim_id=inp.claim_id, started=False,
                               lease_seconds=inp.lease_seconds)
        return ClaimRecord(claimed_by=inp.claimed_by, claimed_by_name=inp.claimed_by_name,
                           claimed_at=now,
                           lease_expires_at=now + timedelta(seconds=inp.lease_seconds))

    def claimed_event_id(self) -> str | None:
        """tool.claimed's id: the first one's as before, later ones (a takeover,
        a claim after a lapse) numbered."""
        self.state.claims += 1
        if self.state.claims == 1:
            return None
        call, session = self.state.input.call, self.state.input.session
        return make_event_id(session.session_id, call.id, "tool.claimed", self.state.claims - 1)

    def _claim_at_release(self) -> ClaimInput | None:
        """The submitting client's claim (CallInput.claim), for a call policy
        released at once; None after a human decision (its submitter may be long
        gone: the client claims when it comes back) or without a valid proof."""
        claim = self.state.input.claim
        if claim is None or self.state.info is not None:
            return None
        unproven = self.state.claim_unproven
        if not self.state.claim_checked:
            # LEGACY: histories from before classify checked the proof replay
            # with the keys they ran under (docs/DURABLE.md, issue 37).
            unproven = proof.problem(claim, proof.KIND_CLAIM_AT_RELEASE,
                                     workflow.info().workflow_id)
        if unproven is not None:
            workflow.logger.warning("the claim at release is ignored: %s", unproven)
            return None
        return claim

    async def _release_claimed(self, prepared: PreparedCall, release: ReleaseView,
                               released: ToolEvent, inp: ClaimInput) -> None:
        """Release and claim in one committed write: the claim is the submitter's
        from the start, so no other client can win it meanwhile."""
        now = workflow.now()
        claim = self.reservation(inp, now)
        self.state.claim = claim
        await self.client_write(
            [released, self.claimed_event(claim, release, at_release=True,
                                           event_id=self.claimed_event_id())],
            CallFacts(ref=self.rec.ref(), status=CallStatus.CLAIMED, opening=self.rec.opening(),
                      request_id=self.rec.request_id(), input=release.input,
                      input_hash=prepared.input_hash, started_at=now),
        )
        self.state.release_stored = True
        self.state.status = CallStatus.CLAIMED
        self.state.claim_stored = True

    async def _claimed_in_time(self, release: ReleaseView) -> bool:
        """Wait for the claim's write; False when no claim was accepted before
        the release's end (issue 37). The timer is data-guarded: histories
        whose plan has no unclaimed_seconds replay without it."""
        seconds = self.state.unclaimed_seconds
        if seconds is not None and self.state.claim is None:
            left = release.released_at + timedelta(seconds=seconds) - workflow.now()
            try:
                await workflow.wait_condition(
                    lambda: self.state.claim is not None,
                    timeout=max(left, timedelta(seconds=1)),
                    timeout_summary="unclaimed release",
                )
            except TimeoutError:
                if self.state.claim is None:  # a claim accepted meanwhile wins
                    return False
        await workflow.wait_condition(lambda: self.state.claim_stored)
        return True

    async def _unclaimed(self, release: ReleaseView) -> CallOutcome:
        """No client claimed the release in time: `unclaimed`, never run; every
        later claim is refused (the status is terminal)."""
        self.state.status = CallStatus.UNCLAIMED
        event = self.rec.event("tool.unclaimed", request_id=self.rec.request_id(), data={
            "released_at": release.released_at.isoformat(),
            "unclaimed_after_seconds": self.state.unclaimed_seconds,
        })
        outcome = self.rec.error(ToolErrorClass.EXECUTION_ERROR, UNCLAIMED_TEXT)
        outcome = outcome.model_copy(update={"status": CallStatus.UNCLAIMED})
        return await self.rec.finish(outcome, event=None, carried=[event])

    def claimed_event(self, claim: ClaimRecord, release: ReleaseView, *,
                       at_release: bool = False, event_id: str | None = None,
                       takeover: bool = False) -> ToolEvent:
        data: dict[str, Any] = {
            "claimed_by": claim.claimed_by, "claimed_by_name": claim.claimed_by_name,
            "lease_expires_at": claim.lease_expires_at.isoformat(),
            "input_sha256": release.input_sha256,
        }
        if at_release:  # the submitter's own claim (the API answers its submit with it)
            data["at_release"] = True
        if claim.claim_id is not None:  # a reservation, until its holder starts it
            data.update(claim_id=claim.claim_id, started=False,
                        lease_seconds=claim.lease_seconds)
        if takeover:
            data["takeover"] = True
        extra: dict[str, Any] = {"event_id": event_id} if event_id is not None else {}
        return self.rec.event("tool.claimed", request_id=self.rec.request_id(), data=data, **extra)

    async def _store_outcome(self, report: OutcomeInput, claim: ClaimRecord) -> CallOutcome:
        event = self.rec.event("tool.outcome_reported", request_id=self.rec.request_id(), data={
            "is_error": report.is_error, "input_sha256": report.input_sha256,
            "reported_by": report.reported_by, "reported_by_name": report.reported_by_name,
            # The API answers its reporter from the stored row when this matches.
            "report_sha256": report.report_sha256(),
        })
        now = workflow.now()
        stored = await workflow.execute_activity(
            acts.client_outcome,
            ClientOutcomeRecord(ref=self.rec.ref(), report=report, events=[event],
                                request_id=self.rec.request_id(),
                                started_at=claim.started_at or claim.claimed_at,
                                finished_at=now),
            start_to_close_timeout=WRITE_TIMEOUT,
            retry_policy=WRITE_RETRY,
        )
        duration = (now - (claim.started_at or claim.claimed_at)).total_seconds() * 1000
        outcome = CallOutcome(
            result=stored.result, status=stored.status,
            error_class=stored.result.error_class,
            request_id=self.rec.request_id(), decision=self.state.decision,
            duration_ms=duration,
        )
        self.state.status = outcome.status
        self.state.outcome = outcome
        self.state.report_result = OutcomeResult(status=outcome.status, result=outcome.result,
                                            message="outcome recorded")
        return outcome

    async def _lease_expired(self, claim: ClaimRecord) -> CallOutcome:
        """No outcome before the lease ended: outcome_unknown (never failed, never
        released again)."""
        self.state.status = CallStatus.OUTCOME_UNKNOWN  # refuses every later claim/report
        event = self.rec.event("tool.lease_expired", request_id=self.rec.request_id(), data={
            "claimed_by": claim.claimed_by, "claimed_at": claim.claimed_at.isoformat(),
            "lease_expires_at": claim.lease_expires_at.isoformat(),
        })
        outcome = self.rec.error(ToolErrorClass.EXECUTION_ERROR, OUTCOME_UNKNOWN_TEXT)
        outcome = outcome.model_copy(update={"status": CallStatus.OUTCOME_UNKNOWN})
        return await self.rec.finish(outcome, event=None, carried=[event])

    def release_view(self) -> ReleaseView | None:
        """The status query's view: the released input, its hash, the claim."""
        state = self.state
        if state.release is None:
            return None
        return state.release.model_copy(update={"claim": state.claim, "report": state.report})

    async def client_write(self, events: list[ToolEvent], facts: CallFacts) -> None:
        """A committed store write; the decision not yet written goes first."""
        res = self.state.unwritten_resolution
        self.state.unwritten_resolution = None
        record = RecordInput(events=events, facts=facts)
        if res is not None:
            if res.facts is not None and res.facts.input is not None:
                facts = facts.model_copy(update={"input": res.facts.input,
                                                 "input_hash": res.facts.input_hash
                                                 or facts.input_hash})
            record = RecordInput(events=[*res.events, *events], facts=facts,
                                 approval=res.approval,
                                 approval_decision_only=res.approval_decision_only,
                                 remember=res.remember)
        await workflow.execute_activity(
            acts.record_committed, record,
            start_to_close_timeout=WRITE_TIMEOUT, retry_policy=WRITE_RETRY,
        )
