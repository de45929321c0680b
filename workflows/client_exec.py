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
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow

from parkgate.workflows.client_updates import WRITE_RETRY, WRITE_TIMEOUT, ClientUpdates

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
    from parkgate.calls.events import EventType, ToolEvent
    from parkgate.calls.records import CallOpening, CallRef
    from parkgate.durable.payloads import CallInput
    from parkgate.verdicts import ApprovalInfo

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


class ClientExecution(ClientUpdates):
    """Mixin of ToolCallWorkflow: the release/claim/outcome path (its updates,
    claim, start_claim and report_outcome, in client_updates.py)."""

    # Provided by ToolCallWorkflow.
    if TYPE_CHECKING:
        _input: CallInput
        _status: CallStatus
        _info: ApprovalInfo | None
        _outcome: CallOutcome | None
        _committed_writes: bool | None
        _unwritten_resolution: RecordInput | None

        def _ref(self) -> CallRef: ...
        def _opening(self) -> CallOpening | None: ...
        def _event(self, type_: EventType, **kw: object) -> ToolEvent: ...
        async def _finish(self, outcome: CallOutcome, *, event: EventType | None,
                          carried: list[ToolEvent] | None = None) -> CallOutcome: ...
        def _error(self, error_class: ToolErrorClass, text: str) -> CallOutcome: ...

    def _init_client(self) -> None:
        self._release: ReleaseView | None = None
        #: PATCH_JCS_INPUT_SHA256, asked at the start of a client tool's call.
        self._jcs_input_sha256 = False
        #: The release's store write has committed (claims accepted while it was
        #: in flight wait for it: the store may show the release first).
        self._release_stored = False
        self._claim: ClaimRecord | None = None
        self._claim_stored = False
        self._report: OutcomeInput | None = None
        self._report_result: OutcomeResult | None = None
        self._refusals = 0
        #: classify checked CallInput.claim's proof (ClassifyOutput.claim_checked):
        #: its verdict, from history, decides the claim at release.
        self._claim_checked = False
        self._claim_unproven: str | None = None
        #: ExecPlan.unclaimed_seconds: how long a release waits for its claim
        #: (None, in histories from before: it waits on).
        self._unclaimed_seconds: float | None = None
        #: PATCH_CLAIM_RESERVATION, asked at the start of a client tool's call.
        self._reserving = False
        #: Claims recorded (reservations taken, taken over or after a lapse):
        #: the seq of the next tool.claimed event.
        self._claims = 0
        self._lapses = 0
        #: A lapse's store write in flight: a new claim writes after it.
        self._lapsing = False
        #: The started claim's store write has committed.
        self._start_stored = False

    def _is_client_call(self, prepared: PreparedCall) -> bool:
        """A call its client runs (only calls started with a client tool, which no
        history from before client tools has)."""
        return self._input.client_tool is not None and prepared.definition.client_executed

    # ---------------------------------------------------------------- path
    async def _release_call(self, prepared: PreparedCall) -> CallOutcome:
        """Release the approved call, then wait for its claim and its outcome."""
        # Every write of this path is a committed (regular) activity.
        self._committed_writes = True
        call_input = prepared.call.input
        sha = input_sha256(call_input) if self._jcs_input_sha256 \
            else legacy_input_sha256(call_input)
        release = ReleaseView(input=call_input, input_sha256=sha, released_at=workflow.now())
        event = self._event("tool.released", request_id=self._request_id(), data={
            "input_sha256": release.input_sha256, "approval_hash": prepared.input_hash,
        })
        # Set before the write: a claim that reads the stored release before
        # this workflow sees the write done is accepted and waits for it.
        self._release = release
        at_release = self._claim_at_release()
        if at_release is not None:
            await self._release_claimed(prepared, release, event, at_release)
        else:
            await self._client_write(
                [event],
                CallFacts(ref=self._ref(), status=CallStatus.RELEASED, opening=self._opening(),
                          request_id=self._request_id(), input=call_input,
                          input_hash=prepared.input_hash),
            )
            self._release_stored = True
            self._status = CallStatus.RELEASED
        claim: ClaimRecord | None
        if self._reserving:
            claim = await self._started_claim(release)
            if claim is None:
                return await self._unclaimed(release)
        else:
            if not await self._claimed_in_time(release):
                return await self._unclaimed(release)
            claim = self._claim
        assert claim is not None
        left = claim.lease_expires_at - workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self._report is not None,
                timeout=max(left, timedelta(seconds=1)),
                timeout_summary="client lease",
            )
        except TimeoutError:
            if self._report is None:
                return await self._lease_expired(claim)
        report = self._report
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
            claim = self._claim
            assert claim is not None
            if claim.started or self._report is not None:
                if claim.started and claim.claim_id is not None:
                    await workflow.wait_condition(lambda: self._start_stored)
                return self._claim if self._claim is not None else claim
            left = claim.lease_expires_at - workflow.now()
            try:
                await workflow.wait_condition(
                    lambda c=claim: self._claim is not c or self._report is not None,  # type: ignore[misc]
                    timeout=max(left, timedelta(seconds=1)),
                    timeout_summary="claim reservation",
                )
            except TimeoutError:
                if self._claim is claim and self._report is None:
                    await self._lapse(claim)
            # taken over, started (a new record), reported or lapsed: look again

    async def _lapse(self, claim: ClaimRecord) -> None:
        """An unstarted reservation ended: its holder never ran the call, which
        is released again (the row says released; a start of it is refused)."""
        self._claim = None
        self._claim_stored = False
        self._status = CallStatus.RELEASED
        self._lapses += 1
        self._lapsing = True
        call, session = self._input.call, self._input.session
        event = self._event(
            "tool.claim_lapsed", request_id=self._request_id(),
            event_id=make_event_id(session.session_id, call.id, "tool.claim_lapsed",
                                   self._lapses),
            data={"claimed_by": claim.claimed_by, "claim_id": claim.claim_id,
                  "claimed_at": claim.claimed_at.isoformat(),
                  "reserved_until": claim.lease_expires_at.isoformat()})
        try:
            await self._client_write([event], CallFacts(
                ref=self._ref(), status=CallStatus.RELEASED, request_id=self._request_id()))
        finally:
            self._lapsing = False

    def _reservation(self, inp: ClaimInput, now: Any) -> ClaimRecord:
        """The claim `inp` gets: a reservation (patched, the API named it) or,
        as before, a run with its lease."""
        if self._reserving and inp.claim_id is not None:
            reserve = inp.reserve_seconds or inp.lease_seconds
            return ClaimRecord(claimed_by=inp.claimed_by, claimed_by_name=inp.claimed_by_name,
                               claimed_at=now, lease_expires_at=now + timedelta(seconds=reserve),
                               claim_id=inp.claim_id, started=False,
                               lease_seconds=inp.lease_seconds)
        return ClaimRecord(claimed_by=inp.claimed_by, claimed_by_name=inp.claimed_by_name,
                           claimed_at=now,
                           lease_expires_at=now + timedelta(seconds=inp.lease_seconds))

    def _claimed_event_id(self) -> str | None:
        """tool.claimed's id: the first one's as before, later ones (a takeover,
        a claim after a lapse) numbered."""
        self._claims += 1
        if self._claims == 1:
            return None
        call, session = self._input.call, self._input.session
        return make_event_id(session.session_id, call.id, "tool.claimed", self._claims - 1)

    def _claim_at_release(self) -> ClaimInput | None:
        """The submitting client's claim (CallInput.claim), for a call policy
        released at once; None after a human decision (its submitter may be long
        gone: the client claims when it comes back) or without a valid proof."""
        claim = self._input.claim
        if claim is None or self._info is not None:
            return None
        unproven = self._claim_unproven
        if not self._claim_checked:
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
        claim = self._reservation(inp, now)
        self._claim = claim
        await self._client_write(
            [released, self._claimed_event(claim, release, at_release=True,
                                           event_id=self._claimed_event_id())],
            CallFacts(ref=self._ref(), status=CallStatus.CLAIMED, opening=self._opening(),
                      request_id=self._request_id(), input=release.input,
                      input_hash=prepared.input_hash, started_at=now),
        )
        self._release_stored = True
        self._status = CallStatus.CLAIMED
        self._claim_stored = True

    async def _claimed_in_time(self, release: ReleaseView) -> bool:
        """Wait for the claim's write; False when no claim was accepted before
        the release's end (issue 37). The timer is data-guarded: histories
        whose plan has no unclaimed_seconds replay without it."""
        seconds = self._unclaimed_seconds
        if seconds is not None and self._claim is None:
            left = release.released_at + timedelta(seconds=seconds) - workflow.now()
            try:
                await workflow.wait_condition(
                    lambda: self._claim is not None,
                    timeout=max(left, timedelta(seconds=1)),
                    timeout_summary="unclaimed release",
                )
            except TimeoutError:
                if self._claim is None:  # a claim accepted meanwhile wins
                    return False
        await workflow.wait_condition(lambda: self._claim_stored)
        return True

    async def _unclaimed(self, release: ReleaseView) -> CallOutcome:
        """No client claimed the release in time: `unclaimed`, never run; every
        later claim is refused (the status is terminal)."""
        self._status = CallStatus.UNCLAIMED
        event = self._event("tool.unclaimed", request_id=self._request_id(), data={
            "released_at": release.released_at.isoformat(),
            "unclaimed_after_seconds": self._unclaimed_seconds,
        })
        outcome = self._error(ToolErrorClass.EXECUTION_ERROR, UNCLAIMED_TEXT)
        outcome = outcome.model_copy(update={"status": CallStatus.UNCLAIMED})
        return await self._finish(outcome, event=None, carried=[event])

    def _claimed_event(self, claim: ClaimRecord, release: ReleaseView, *,
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
        return self._event("tool.claimed", request_id=self._request_id(), data=data, **extra)

    async def _store_outcome(self, report: OutcomeInput, claim: ClaimRecord) -> CallOutcome:
        event = self._event("tool.outcome_reported", request_id=self._request_id(), data={
            "is_error": report.is_error, "input_sha256": report.input_sha256,
            "reported_by": report.reported_by, "reported_by_name": report.reported_by_name,
            # The API answers its reporter from the stored row when this matches.
            "report_sha256": report.report_sha256(),
        })
        now = workflow.now()
        stored = await workflow.execute_activity(
            acts.client_outcome,
            ClientOutcomeRecord(ref=self._ref(), report=report, events=[event],
                                request_id=self._request_id(),
                                started_at=claim.started_at or claim.claimed_at,
                                finished_at=now),
            start_to_close_timeout=WRITE_TIMEOUT,
            retry_policy=WRITE_RETRY,
        )
        duration = (now - (claim.started_at or claim.claimed_at)).total_seconds() * 1000
        outcome = CallOutcome(
            result=stored.result, status=stored.status,
            error_class=stored.result.error_class,
            request_id=self._request_id(), decision=getattr(self, "_decision", None),
            duration_ms=duration,
        )
        self._status = outcome.status
        self._outcome = outcome
        self._report_result = OutcomeResult(status=outcome.status, result=outcome.result,
                                            message="outcome recorded")
        return outcome

    async def _lease_expired(self, claim: ClaimRecord) -> CallOutcome:
        """No outcome before the lease ended: outcome_unknown (never failed, never
        released again)."""
        self._status = CallStatus.OUTCOME_UNKNOWN  # refuses every later claim/report
        event = self._event("tool.lease_expired", request_id=self._request_id(), data={
            "claimed_by": claim.claimed_by, "claimed_at": claim.claimed_at.isoformat(),
            "lease_expires_at": claim.lease_expires_at.isoformat(),
        })
        outcome = self._error(ToolErrorClass.EXECUTION_ERROR, OUTCOME_UNKNOWN_TEXT)
        outcome = outcome.model_copy(update={"status": CallStatus.OUTCOME_UNKNOWN})
        return await self._finish(outcome, event=None, carried=[event])

    def _release_view(self) -> ReleaseView | None:
        """The status query's view: the released input, its hash, the claim."""
        if self._release is None:
            return None
        return self._release.model_copy(update={"claim": self._claim, "report": self._report})

    def _request_id(self) -> str | None:
        return self._info.request_id if self._info else None

    async def _client_write(self, events: list[ToolEvent], facts: CallFacts) -> None:
        """A committed store write; the decision not yet written goes first."""
        res = self._unwritten_resolution
        self._unwritten_resolution = None
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
