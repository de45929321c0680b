"""Payloads of client-executed calls: release, claim, outcome (see docs/CLIENT_TOOLS.md).

A client tool's call is classified and parked like any other; once approved
the workflow releases it (the input to run and its `input_sha256`) and waits
for one claim (a lease on a durable timer) and one outcome. Claims and
outcomes are workflow updates, so the API answers only after the workflow
accepted them and after the store write their answer speaks of committed.
Field names are part of Temporal history: add fields with defaults only.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from parkgate.approvals.proof import Proof
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallRef, CallStatus, RecordedFinish
from parkgate.models import ContentBlock, ToolResultBlock, canonical_json

#: Stable names: written into Temporal history.
UPDATE_CLAIM = "claim"
UPDATE_OUTCOME = "report_outcome"
#: Update that confirms a reservation (the claimer is alive and runs the tool now).
UPDATE_START = "start_claim"
#: Proof kind of a start (issue 28): kinds are plain strings in the proof.
KIND_START = "start"
ACT_CLIENT_OUTCOME = "parkgate.client_outcome"
LATE_OUTCOME_WORKFLOW = "parkgate.LateOutcome"
#: ApplicationError type of a refused claim or outcome (details: [reason, info]).
CLIENT_REJECTED_ERROR_TYPE = "ClientCallRejected"


class ClientReject(StrEnum):
    """Why a claim or an outcome was refused (stable values: they cross processes)."""

    #: The call is not released (still parked, denied, or not a client tool).
    NOT_RELEASED = "not_released"
    #: Another client claimed first: who and when travel with the refusal.
    ALREADY_CLAIMED = "already_claimed"
    #: An outcome for a call nobody claimed.
    NOT_CLAIMED = "not_claimed"
    #: Another outcome was reported first (the first report stands).
    REPORT_CONFLICT = "report_conflict"
    #: The reported input hash is not the released one (refused and recorded).
    HASH_MISMATCH = "hash_mismatch"
    #: The call has ended (outcome_unknown, cancelled): no claim any more.
    ENDED = "ended"
    #: A lease asked for is not acceptable.
    INVALID = "invalid"
    #: The update carries no valid proof that parkgate's API sent it (issue 28).
    UNPROVEN = "unproven"


#: What the model reads of a released call no client claimed in time.
UNCLAIMED_TEXT = (
    "No client claimed this call in time after it was released: it never ran "
    "and will not run."
)


class ClaimInput(BaseModel):
    """Update `claim`: one client asks to run the released call."""

    #: The agent key that claims ("key:<id>"), as the API authenticated it.
    claimed_by: str
    #: Its name, for people reading the audit.
    claimed_by_name: str | None = None
    lease_seconds: float = Field(gt=0)
    #: Proof that parkgate's API sent this update (issue 28).
    proof: Proof | None = None
    #: Set by the API (patch "claim-reservation"): the claim is a reservation
    #: named by this id, which its holder must start before it runs the tool.
    claim_id: str | None = None
    #: How long an unstarted reservation holds before the call is released again.
    reserve_seconds: float | None = Field(default=None, gt=0)


class ClaimRecord(BaseModel):
    """The standing claim: who, when, until when.

    A reservation (claim_id set) is not a run: until its holder starts it,
    `lease_expires_at` is the end of the reservation, the same claimer may take
    it over, and at its end the call is released again. Only a started claim
    has a lease that can end outcome_unknown."""

    claimed_by: str
    claimed_by_name: str | None = None
    claimed_at: datetime
    lease_expires_at: datetime
    claim_id: str | None = None
    #: False only for a reservation not started yet (older claims are runs).
    started: bool = True
    started_at: datetime | None = None
    #: The lease a start gets (a reservation's).
    lease_seconds: float | None = None


class ClaimResult(ClaimRecord):
    """What the winner gets: the input to run and its hash."""

    input: dict[str, Any]
    input_sha256: str


class StartInput(BaseModel):
    """Update `start_claim`: the holder of a reservation runs the tool now."""

    claim_id: str
    #: The agent key that starts ("key:<id>"): the reservation's holder only.
    started_by: str
    #: Proof that parkgate's API sent this update (issue 28).
    proof: Proof | None = None


class OutcomeInput(BaseModel):
    """Update `report_outcome`: what the client's run of the tool returned."""

    content: list[ContentBlock] = Field(default_factory=list)
    is_error: bool = False
    input_sha256: str
    reported_by: str
    reported_by_name: str | None = None
    #: Proof that parkgate's API sent this update (issue 28).
    proof: Proof | None = None

    def same_report(self, other: OutcomeInput) -> bool:
        """The same report again (who sends it does not matter: the content does)."""
        return (self.content, self.is_error, self.input_sha256) == (
            other.content, other.is_error, other.input_sha256)

    def report_sha256(self) -> str:
        """SHA-256 hex of what `same_report` compares (canonical JSON): recorded
        with the report, so the API can tell its report from the store alone.
        (Text, ASCII keys, a bool and a hex string: the same bytes under RFC
        8785 as under the json.dumps form before it, so recorded ones still match.)"""
        doc = {"content": [b.model_dump(mode="json") for b in self.content],
               "is_error": self.is_error, "input_sha256": self.input_sha256}
        return hashlib.sha256(canonical_json(doc).encode("utf-8")).hexdigest()


class OutcomeResult(BaseModel):
    """What a reporter learns: the call's status and the result the model gets."""

    status: CallStatus
    late: bool = False
    result: ToolResultBlock | None = None
    message: str = ""


class ReleaseView(BaseModel):
    """The `status` query's view of a released call (the store keeps the input
    redacted; the client needs the input as released)."""

    input: dict[str, Any]
    input_sha256: str
    released_at: datetime
    claim: ClaimRecord | None = None
    #: The accepted report (a repeat after the call closed is answered alike).
    report: OutcomeInput | None = None


class ClientOutcomeRecord(BaseModel):
    """parkgate.client_outcome input: store a reported outcome (truncated for the
    model, whole in the store) with its events and the final row."""

    ref: CallRef
    report: OutcomeInput
    events: list[ToolEvent] = Field(default_factory=list)
    request_id: str | None = None
    started_at: datetime | None = None
    finished_at: datetime
    #: A report after the lease ended: recorded beside outcome_unknown, the
    #: row's status and result stay.
    late: bool = False
    #: Check the report's proof (kind "outcome", bound to the activity's
    #: workflow id) first: refused, nothing is written and
    #: ClientOutcomeRecorded.unproven says why. In the activity, so the
    #: verdict is in history and no replay reads the worker's keys (issue 37).
    check_proof: bool = False


class ClientOutcomeRecorded(BaseModel):
    """The stored outcome: the result as the model gets it."""

    result: ToolResultBlock
    status: CallStatus
    #: Set when the call's final state was already stored (a retried write).
    finished: RecordedFinish | None = None
    #: Why the report is not proven (ClientOutcomeRecord.check_proof): nothing stored.
    unproven: str | None = None


class LateOutcomeInput(BaseModel):
    """parkgate.LateOutcome: a report that came after the call ended
    (outcome_unknown, or cancelled while its claimer ran it)."""

    ref: CallRef
    report: OutcomeInput
    side_effects: str | None = None
    #: The call's final status the report stands beside (None: outcome_unknown).
    status: CallStatus | None = None


class LateOutcomeResult(BaseModel):
    """What parkgate.LateOutcome recorded (and the report, to compare a repeat)."""

    outcome: OutcomeResult
    report: OutcomeInput


def late_workflow_id(session_id: str, tool_use_id: str) -> str:
    """The one late-outcome workflow of a call: the first late report stands."""
    return f"late/{session_id}/{tool_use_id}"
