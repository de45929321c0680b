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
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import proof
    from parkgate.calls.events import make_event_id
    from parkgate.calls.records import CallFacts, CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.client_payloads import (
        CLIENT_REJECTED_ERROR_TYPE,
        KIND_START,
        UNCLAIMED_TEXT,
        UPDATE_CLAIM,
        UPDATE_OUTCOME,
        UPDATE_START,
        ClaimInput,
        ClaimRecord,
        ClaimResult,
        ClientOutcomeRecord,
        ClientReject,
        OutcomeInput,
        OutcomeResult,
        ReleaseView,
        StartInput,
    )
    from parkgate.durable.payloads import CallOutcome, RecordInput
    from parkgate.models import (
        ToolErrorClass,
        input_sha256,
        is_input_sha256,
        legacy_input_sha256,
    )
    from parkgate.verdicts import PreparedCall

if TYPE_CHECKING:
    from parkgate.calls.events import EventType, ToolEvent
    from parkgate.calls.records import CallOpening, CallRef
    from parkgate.durable.payloads import CallInput
    from parkgate.verdicts import ApprovalInfo

_WRITE_TIMEOUT = timedelta(seconds=10)
_WRITE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)
)
#: workflow.patched id: a call started from here on is released with its RFC 8785
#: input_sha256 (parkgate.jcs); one started before keeps the json.dumps form.
#: Asked at the start of a call with a client tool (ToolCallWorkflow._run).
PATCH_JCS_INPUT_SHA256 = "jcs-input-sha256"
#: workflow.patched id: a report carrying the released input's hash in its other
#: form (RFC 8785 or json.dumps) is taken, so a call in flight across the upgrade
#: finishes whichever version its client is; refusals recorded before replay as such.
PATCH_EITHER_SHA256_FORM = "either-input-sha256-form"
#: Refused reports (wrong hash) recorded per call; more are refused unrecorded
#: (the history of one call stays bounded).
_MAX_RECORDED_REFUSALS = 20

#: A claim is a reservation its holder starts before it runs the tool.
PATCH_CLAIM_RESERVATION = "claim-reservation"

OUTCOME_UNKNOWN_TEXT = (
    "The client claimed this call but reported no outcome before its lease ended; "
    "outcome unknown (it may have run). It will not be released again."
)


class ClientExecution:
    """Mixin of ToolCallWorkflow: the release/claim/outcome path and its updates."""

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
            start_to_close_timeout=_WRITE_TIMEOUT,
            retry_policy=_WRITE_RETRY,
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
            start_to_close_timeout=_WRITE_TIMEOUT, retry_policy=_WRITE_RETRY,
        )

    def _check_proof(self, inp: ClaimInput | OutcomeInput | StartInput, kind: str) -> None:
        """Only parkgate's API may claim or report (issue 28): checked first,
        before the refusal could tell anything of the call's state."""
        unproven = proof.problem(inp, kind, workflow.info().workflow_id)
        if unproven is not None:
            raise ApplicationError(f"{kind} refused: {unproven}", ClientReject.UNPROVEN.value,
                                   {}, type=CLIENT_REJECTED_ERROR_TYPE, non_retryable=True)

    # --------------------------------------------------------------- claim
    def _claim_problem(self, inp: ClaimInput | None = None
                       ) -> tuple[ClientReject, str] | None:
        if self._claim is not None:
            if self._may_take_over(inp) and not self._status.terminal:
                return None
            return ClientReject.ALREADY_CLAIMED, "the call was already claimed"
        if self._release is not None and not self._status.terminal:
            return None  # released (or its release write in flight: the claim waits)
        if self._status == CallStatus.UNCLAIMED:
            return ClientReject.ENDED, UNCLAIMED_TEXT
        if self._status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self._status.value})"
        return ClientReject.NOT_RELEASED, f"the call is not released ({self._status.value})"

    def _is_current(self, claim: ClaimRecord) -> bool:
        current = self._claim
        return current is claim or (current is not None and claim.claim_id is not None
                                    and current.claim_id == claim.claim_id)

    def _may_take_over(self, inp: ClaimInput | None) -> bool:
        """The standing claim is an unstarted reservation of the same claimer
        (a restarted agent, which never received it or never ran it)."""
        claim = self._claim
        return (inp is not None and inp.claim_id is not None and claim is not None
                and not claim.started and claim.claimed_by == inp.claimed_by
                and self._report is None)

    def _rejection(self, reason: ClientReject, message: str) -> ApplicationError:
        info: dict[str, Any] = {"status": self._status.value}
        if self._claim is not None:
            info["claim"] = self._claim.model_dump(mode="json")
        if self._release is not None:
            info["input_sha256"] = self._release.input_sha256
        return ApplicationError(message, reason.value, info,
                                type=CLIENT_REJECTED_ERROR_TYPE, non_retryable=True)

    @workflow.update(name=UPDATE_CLAIM)
    async def claim(self, inp: ClaimInput) -> ClaimResult:
        """The first claim wins a lease; every later one learns who claimed and when.

        Patched: the claim is a reservation (see the module docstring); the same
        claimer takes an unstarted one over."""
        problem = self._claim_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        if not self._release_stored or self._lapsing:
            await workflow.wait_condition(
                lambda: (self._release_stored and not self._lapsing) or self._status.terminal)
            problem = self._claim_problem(inp)  # another claim may have won meanwhile
            if problem is not None:
                raise self._rejection(*problem)
        release = self._release
        assert release is not None
        now = workflow.now()
        takeover = self._claim is not None
        claim = self._reservation(inp, now)
        self._claim = claim
        self._claim_stored = False
        self._status = CallStatus.CLAIMED
        await self._client_write(
            [self._claimed_event(claim, release, event_id=self._claimed_event_id(),
                                 takeover=takeover)],
            CallFacts(ref=self._ref(), status=CallStatus.CLAIMED,
                      request_id=self._request_id(),
                      started_at=now if claim.claim_id is None else None))
        if self._is_current(claim):  # not taken over or lapsed meanwhile (a start
            self._claim_stored = True  # replaces the record, keeping its claim_id)
        return ClaimResult(**claim.model_dump(), input=release.input,
                           input_sha256=release.input_sha256)

    @claim.validator
    def _validate_claim(self, inp: ClaimInput) -> None:
        self._check_proof(inp, proof.KIND_CLAIM)
        problem = self._claim_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)

    # --------------------------------------------------------------- start
    def _start_problem(self, inp: StartInput) -> tuple[ClientReject, str] | None:
        claim = self._claim
        if claim is not None and claim.claim_id == inp.claim_id:
            if claim.claimed_by != inp.started_by:
                return ClientReject.ALREADY_CLAIMED, "the reservation is another claimer's"
            if claim.started or not self._status.terminal:
                return None  # (again: answered alike)
        if self._status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self._status.value})"
        if claim is not None:
            return ClientReject.ALREADY_CLAIMED, \
                "the reservation was taken over or the call claimed by another"
        return ClientReject.NOT_CLAIMED, \
            "the reservation lapsed before it was started: claim the call again"

    @workflow.update(name=UPDATE_START)
    async def start_claim(self, inp: StartInput) -> ClaimResult:
        """The holder of a reservation runs the call now: its lease begins, and
        from here on its end is outcome_unknown (the tool may have run)."""
        problem = self._start_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        claim = self._claim
        release = self._release
        assert claim is not None and release is not None
        if not claim.started:
            now = workflow.now()
            started = claim.model_copy(update={
                "started": True, "started_at": now,
                "lease_expires_at": now + timedelta(seconds=claim.lease_seconds or 1.0)})
            self._claim = started
            self._start_stored = False
            # The reservation's own write first (the row's order follows).
            await workflow.wait_condition(lambda: self._claim_stored or self._status.terminal)
            event = self._event(
                "tool.claim_started", request_id=self._request_id(),
                event_id=make_event_id(self._input.session.session_id, self._input.call.id,
                                       "tool.claim_started"),
                data={"claimed_by": started.claimed_by, "claim_id": started.claim_id,
                      "lease_expires_at": started.lease_expires_at.isoformat(),
                      "input_sha256": release.input_sha256})
            await self._client_write([event], CallFacts(
                ref=self._ref(), status=CallStatus.CLAIMED, request_id=self._request_id(),
                started_at=now))
            self._claim_stored = True
            self._start_stored = True
        else:
            await workflow.wait_condition(lambda: self._start_stored)
        done = self._claim
        assert done is not None
        return ClaimResult(**done.model_dump(), input=release.input,
                           input_sha256=release.input_sha256)

    @start_claim.validator
    def _validate_start(self, inp: StartInput) -> None:
        self._check_proof(inp, KIND_START)
        problem = self._start_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)

    # ------------------------------------------------------------- outcome
    def _outcome_problem(self, inp: OutcomeInput) -> tuple[ClientReject, str] | None:
        if self._report is not None:
            if self._report.same_report(inp):
                return None
            return ClientReject.REPORT_CONFLICT, "another outcome was reported first"
        if self._claim is not None and not self._status.terminal:
            return None  # claimed (its write may be in flight: the outcome waits for it)
        if self._status == CallStatus.OUTCOME_UNKNOWN:
            return ClientReject.ENDED, "the lease ended: the call is outcome_unknown"
        if self._status == CallStatus.RELEASED:
            return ClientReject.NOT_CLAIMED, "claim the call before reporting its outcome"
        if self._status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self._status.value})"
        return ClientReject.NOT_RELEASED, f"the call is not released ({self._status.value})"

    @workflow.update(name=UPDATE_OUTCOME)
    async def report_outcome(self, inp: OutcomeInput) -> OutcomeResult:
        """Record the client's outcome: the same report again is answered alike; a
        hash other than the released one is refused and recorded."""
        problem = self._outcome_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        release = self._release
        assert release is not None
        if self._report is None and inp.input_sha256 != release.input_sha256 \
                and not self._other_form_of(inp.input_sha256, release):
            await self._refuse_hash(inp, release)
            raise self._rejection(
                ClientReject.HASH_MISMATCH,
                "the reported input_sha256 is not the released input's: refused and recorded",
            )
        if self._report is None:
            self._report = inp
        await workflow.wait_condition(
            lambda: self._report_result is not None or self._outcome is not None)
        if self._report_result is None:
            raise self._rejection(ClientReject.ENDED, "the call ended before its outcome")
        return self._report_result

    @report_outcome.validator
    def _validate_outcome(self, inp: OutcomeInput) -> None:
        self._check_proof(inp, proof.KIND_OUTCOME)
        problem = self._outcome_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)

    @staticmethod
    def _other_form_of(reported: str, release: ReleaseView) -> bool:
        """The released input's hash in its other form (RFC 8785 or the json.dumps
        one before it): a client of the other version ran the same input."""
        return is_input_sha256(reported, release.input) \
            and workflow.patched(PATCH_EITHER_SHA256_FORM)

    async def _refuse_hash(self, inp: OutcomeInput, release: ReleaseView) -> None:
        """Record a refused report (bounded per call)."""
        self._refusals += 1
        if self._refusals > _MAX_RECORDED_REFUSALS:
            return
        call, session = self._input.call, self._input.session
        event = self._event(
            "tool.outcome_refused", request_id=self._request_id(),
            event_id=make_event_id(session.session_id, call.id, "tool.outcome_refused",
                                   self._refusals),
            message="reported input hash differs from the released input's",
            data={"reported_sha256": inp.input_sha256, "released_sha256": release.input_sha256,
                  "reported_by": inp.reported_by, "is_error": inp.is_error},
        )
        await workflow.execute_activity(
            acts.record_committed, RecordInput(events=[event]),
            start_to_close_timeout=_WRITE_TIMEOUT, retry_policy=_WRITE_RETRY,
        )
