"""The client-executed call's updates: claim, start_claim, report_outcome.

Part of ToolCallWorkflow's client path (client_exec.py releases the call and
waits; these handlers are how the agent's side, through parkgate's API, takes
it, starts it and says how it went). Each update has a validator that refuses
early, with the same reason its handler would give: an unproven message
first, before a refusal could tell anything of the call's state. Every store
write is a regular activity, scheduled once the workflow task that accepted
the update is committed. `ClientUpdates` is built with the call's state,
its recording part and the client path (client_exec.py, whose claim records
and committed write it shares); the update handlers and their validators are
methods of ToolCallWorkflow that hand their input to it. Deterministic code only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from parkgate.workflows.client_exec import WRITE_RETRY, WRITE_TIMEOUT

with workflow.unsafe.imports_passed_through():
    from parkgate.approvals import proof
    from parkgate.calls.events import make_event_id
    from parkgate.calls.records import CallFacts, CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.client_payloads import (
        CLIENT_REJECTED_ERROR_TYPE,
        KIND_START,
        UNCLAIMED_TEXT,
        ClaimInput,
        ClaimRecord,
        ClaimResult,
        ClientReject,
        OutcomeInput,
        OutcomeResult,
        ReleaseView,
        StartInput,
    )
    from parkgate.durable.payloads import RecordInput
    from parkgate.models import is_input_sha256

if TYPE_CHECKING:
    from parkgate.workflows.call_record import CallRecording
    from parkgate.workflows.call_state import CallState
    from parkgate.workflows.client_exec import ClientExecution

#: workflow.patched id: a report carrying the released input's hash in its other
#: form (RFC 8785 or json.dumps) is taken, so a call in flight across the upgrade
#: finishes whichever version its client is; refusals recorded before replay as such.
PATCH_EITHER_SHA256_FORM = "either-input-sha256-form"
#: Refused reports (wrong hash) recorded per call; more are refused unrecorded
#: (the history of one call stays bounded).
_MAX_RECORDED_REFUSALS = 20


class ClientUpdates:
    """ToolCallWorkflow's part that takes the client path's updates: a claim,
    its start, the outcome (each with its validator)."""

    def __init__(self, state: CallState, rec: CallRecording, client: ClientExecution) -> None:
        self.state = state
        self.rec = rec
        self.client = client

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
        if self.state.claim is not None:
            if self._may_take_over(inp) and not self.state.status.terminal:
                return None
            return ClientReject.ALREADY_CLAIMED, "the call was already claimed"
        if self.state.release is not None and not self.state.status.terminal:
            return None  # released (or its release write in flight: the claim waits)
        if self.state.status == CallStatus.UNCLAIMED:
            return ClientReject.ENDED, UNCLAIMED_TEXT
        if self.state.status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self.state.status.value})"
        return ClientReject.NOT_RELEASED, f"the call is not released ({self.state.status.value})"

    def _is_current(self, claim: ClaimRecord) -> bool:
        current = self.state.claim
        return current is claim or (current is not None and claim.claim_id is not None
                                    and current.claim_id == claim.claim_id)

    def _may_take_over(self, inp: ClaimInput | None) -> bool:
        """The standing claim is an unstarted reservation of the same claimer
        (a restarted agent, which never received it or never ran it)."""
        claim = self.state.claim
        return (inp is not None and inp.claim_id is not None and claim is not None
                and not claim.started and claim.claimed_by == inp.claimed_by
                and self.state.report is None)

    def _rejection(self, reason: ClientReject, message: str) -> ApplicationError:
        info: dict[str, Any] = {"status": self.state.status.value}
        if self.state.claim is not None:
            info["claim"] = self.state.claim.model_dump(mode="json")
        if self.state.release is not None:
            info["input_sha256"] = self.state.release.input_sha256
        return ApplicationError(message, reason.value, info,
                                type=CLIENT_REJECTED_ERROR_TYPE, non_retryable=True)

    async def claim(self, inp: ClaimInput) -> ClaimResult:
        """The first claim wins a lease; every later one learns who claimed and when.

        Patched: the claim is a reservation (see the module docstring); the same
        claimer takes an unstarted one over."""
        problem = self._claim_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        if not self.state.release_stored or self.state.lapsing:
            await workflow.wait_condition(lambda: (self.state.release_stored
                                                   and not self.state.lapsing)
                                          or self.state.status.terminal)
            problem = self._claim_problem(inp)  # another claim may have won meanwhile
            if problem is not None:
                raise self._rejection(*problem)
        release = self.state.release
        assert release is not None
        now = workflow.now()
        takeover = self.state.claim is not None
        claim = self.client.reservation(inp, now)
        self.state.claim = claim
        self.state.claim_stored = False
        self.state.status = CallStatus.CLAIMED
        await self.client.client_write(
            [self.client.claimed_event(claim, release, event_id=self.client.claimed_event_id(),
                                 takeover=takeover)],
            CallFacts(ref=self.rec.ref(), status=CallStatus.CLAIMED,
                      request_id=self.rec.request_id(),
                      started_at=now if claim.claim_id is None else None))
        if self._is_current(claim):  # not taken over or lapsed meanwhile (a start
            self.state.claim_stored = True  # replaces the record, keeping its claim_id)
        return ClaimResult(**claim.model_dump(), input=release.input,
                           input_sha256=release.input_sha256)

    def validate_claim(self, inp: ClaimInput) -> None:
        self._check_proof(inp, proof.KIND_CLAIM)
        problem = self._claim_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)

    # --------------------------------------------------------------- start
    def _start_problem(self, inp: StartInput) -> tuple[ClientReject, str] | None:
        claim = self.state.claim
        if claim is not None and claim.claim_id == inp.claim_id:
            if claim.claimed_by != inp.started_by:
                return ClientReject.ALREADY_CLAIMED, "the reservation is another claimer's"
            if claim.started or not self.state.status.terminal:
                return None  # (again: answered alike)
        if self.state.status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self.state.status.value})"
        if claim is not None:
            return ClientReject.ALREADY_CLAIMED, \
                "the reservation was taken over or the call claimed by another"
        return ClientReject.NOT_CLAIMED, \
            "the reservation lapsed before it was started: claim the call again"

    async def start_claim(self, inp: StartInput) -> ClaimResult:
        """The holder of a reservation runs the call now: its lease begins, and
        from here on its end is outcome_unknown (the tool may have run)."""
        problem = self._start_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        claim = self.state.claim
        release = self.state.release
        assert claim is not None and release is not None
        if not claim.started:
            now = workflow.now()
            started = claim.model_copy(update={
                "started": True, "started_at": now,
                "lease_expires_at": now + timedelta(seconds=claim.lease_seconds or 1.0)})
            self.state.claim = started
            self.state.start_stored = False
            # The reservation's own write first (the row's order follows).
            await workflow.wait_condition(
                lambda: self.state.claim_stored or self.state.status.terminal)
            event = self.rec.event(
                "tool.claim_started", request_id=self.rec.request_id(),
                event_id=make_event_id(self.state.input.session.session_id,
                                       self.state.input.call.id, "tool.claim_started"),
                data={"claimed_by": started.claimed_by, "claim_id": started.claim_id,
                      "lease_expires_at": started.lease_expires_at.isoformat(),
                      "input_sha256": release.input_sha256})
            await self.client.client_write([event], CallFacts(
                ref=self.rec.ref(), status=CallStatus.CLAIMED, request_id=self.rec.request_id(),
                started_at=now))
            self.state.claim_stored = True
            self.state.start_stored = True
        else:
            await workflow.wait_condition(lambda: self.state.start_stored)
        done = self.state.claim
        assert done is not None
        return ClaimResult(**done.model_dump(), input=release.input,
                           input_sha256=release.input_sha256)

    def validate_start(self, inp: StartInput) -> None:
        self._check_proof(inp, KIND_START)
        problem = self._start_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)

    # ------------------------------------------------------------- outcome
    def _outcome_problem(self, inp: OutcomeInput) -> tuple[ClientReject, str] | None:
        if self.state.report is not None:
            if self.state.report.same_report(inp):
                return None
            return ClientReject.REPORT_CONFLICT, "another outcome was reported first"
        if self.state.claim is not None and not self.state.status.terminal:
            return None  # claimed (its write may be in flight: the outcome waits for it)
        if self.state.status == CallStatus.OUTCOME_UNKNOWN:
            return ClientReject.ENDED, "the lease ended: the call is outcome_unknown"
        if self.state.status == CallStatus.RELEASED:
            return ClientReject.NOT_CLAIMED, "claim the call before reporting its outcome"
        if self.state.status.terminal:
            return ClientReject.ENDED, f"the call has ended ({self.state.status.value})"
        return ClientReject.NOT_RELEASED, f"the call is not released ({self.state.status.value})"

    async def report_outcome(self, inp: OutcomeInput) -> OutcomeResult:
        """Record the client's outcome: the same report again is answered alike; a
        hash other than the released one is refused and recorded."""
        problem = self._outcome_problem(inp)
        if problem is not None:
            raise self._rejection(*problem)
        release = self.state.release
        assert release is not None
        if self.state.report is None and inp.input_sha256 != release.input_sha256 \
                and not self._other_form_of(inp.input_sha256, release):
            await self._refuse_hash(inp, release)
            raise self._rejection(
                ClientReject.HASH_MISMATCH,
                "the reported input_sha256 is not the released input's: refused and recorded",
            )
        if self.state.report is None:
            self.state.report = inp
        await workflow.wait_condition(
            lambda: self.state.report_result is not None or self.state.outcome is not None)
        if self.state.report_result is None:
            raise self._rejection(ClientReject.ENDED, "the call ended before its outcome")
        return self.state.report_result

    def validate_outcome(self, inp: OutcomeInput) -> None:
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
        self.state.refusals += 1
        if self.state.refusals > _MAX_RECORDED_REFUSALS:
            return
        call, session = self.state.input.call, self.state.input.session
        event = self.rec.event(
            "tool.outcome_refused", request_id=self.rec.request_id(),
            event_id=make_event_id(session.session_id, call.id, "tool.outcome_refused",
                                   self.state.refusals),
            message="reported input hash differs from the released input's",
            data={"reported_sha256": inp.input_sha256, "released_sha256": release.input_sha256,
                  "reported_by": inp.reported_by, "is_error": inp.is_error},
        )
        await workflow.execute_activity(
            acts.record_committed, RecordInput(events=[event]),
            start_to_close_timeout=WRITE_TIMEOUT, retry_policy=WRITE_RETRY,
        )
