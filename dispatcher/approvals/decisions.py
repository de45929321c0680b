"""A human's decision on a parked call: its fields, its values, and why one can be refused.

The decision is defined once, here. `DecisionFields` holds who decided what on
which request and why, flat and nullable as a row stores it (an approval row
inherits it: undecided until someone decides). `DecisionMade` narrows it to a
decision someone gave; `DecisionRecord` (the winner, in Temporal history) and
`DecideInput` (the `decide` update's argument) add their own fields, and the
API's `DecisionOut` derives from the same definition. Field names and defaults
are part of Temporal history: never rename or remove one.

Every place that refuses a decision (the call workflow's `decide` validator
and handler, the sub-call path in the store, the durable client) says why with
a `RejectReason`, so interfaces map a refusal to an answer by its reason, never
by the wording of its message. The reason travels with the update's rejection
(`ApplicationError.details[1]`) and in `DecideResult.reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, Field

from parkgate.approvals.proof import Proof
from parkgate.rules.remember_spec import RememberSpec

Decision = Literal["allow", "deny", "allow_with_edits"]
DECISIONS: tuple[str, ...] = ("allow", "deny", "allow_with_edits")


class DecisionFields(BaseModel):
    """Who decided what on which request, and why: the fields every shape of a
    decision shares, by the same names (approval and call rows, history, API).

    Nullable: an approval row holds them before anyone decides.
    """

    request_id: str
    decision: str | None = None
    reason: str | None = None
    decided_by: str | None = None
    via: str | None = None
    #: The authenticated decider ("key:<id>", "approver:<name>"); None for a
    #: generic link, whose typed name is only `claimed_name`.
    principal_id: str | None = None
    claimed_name: str | None = None
    #: The submitting key decided under a rule with `self_approval: true`.
    self_approved: bool | None = None
    #: How the decider was identified (parkgate.approvals.identity): OIDC issuer +
    #: subject + email, key id, Slack member, personal or generic link.
    identity: dict[str, Any] | None = None

    def decision_fields(self) -> dict[str, Any]:
        """The shared fields by name, as this shape holds them."""
        return {name: getattr(self, name) for name in DecisionFields.model_fields}

    def row_fields(self) -> dict[str, Any]:
        """The shared fields as a row stores them (the approvals table, the call
        row's decision fields): self_approved is None unless true."""
        return self.decision_fields() | {"self_approved": self.self_approved or None}

    def principal(self) -> dict[str, Any]:
        """Who decided beside `decided_by`, as the store's decide-first write takes it."""
        return {"principal_id": self.principal_id, "claimed_name": self.claimed_name,
                "self_approved": self.self_approved or None, "identity": self.identity}


#: How listings mark a name typed on a generic link: a claim, not a principal.
UNVERIFIED = "unverified"


def decider_label(decided_by: str | None, claimed_name: str | None) -> str | None:
    """Who decided, as listings and exports show it: the authenticated decider,
    else the name typed on a generic link marked `(unverified)`, else None."""
    if decided_by:
        return decided_by
    if claimed_name:
        return f"{claimed_name} ({UNVERIFIED})"
    return None


def decider_query(text: str) -> tuple[str, bool | None]:
    """A `decided_by` filter: `alice` matches alice verified or as a typed name,
    `alice (verified)` only the authenticated alice, `alice (unverified)` only
    the name typed on a link. Returns (name, verified or None for either)."""
    stripped = text.strip()
    for suffix, verified in ((f" ({UNVERIFIED})", False), (" (verified)", True)):
        if stripped.endswith(suffix) and stripped != suffix.strip():
            return stripped[: -len(suffix)].strip(), verified
    return stripped, None


#: The decision fields of a call row (CallUpdate, CallRecord): the shared
#: fields but request_id, which the row holds for the request it parked on.
CALL_DECISION_FIELDS: tuple[str, ...] = tuple(
    name for name in DecisionFields.model_fields if name != "request_id"
)


class DecisionMade(DecisionFields):
    """A decision someone gave (the request is decided)."""

    decision: str
    self_approved: bool = False


class DecisionRecord(DecisionMade):
    """The decision that won for a parked call."""

    decision: Decision
    decided_at: datetime
    #: Hash of the input that runs (the edited input for allow_with_edits).
    approved_hash: str | None = None
    #: Quorum requests: the distinct named approvers who allowed, in order.
    votes: list[str] = Field(default_factory=list)
    #: An allow that asked to remember the decision (parkgate.rules.remembered);
    #: the rule is written with the committed decision.
    remember: RememberSpec | None = None

    def approval_fields(self) -> dict[str, Any]:
        """The decision as the approvals row stores it (flat, nullable)."""
        return self.row_fields() | {"decided_at": self.decided_at,
                                    "votes": list(self.votes) or None}


class DecideInput(DecisionMade):
    """A human's decision on a parked call (update or signal `decide`).

    `decision` is a plain string so an invalid value reaches the validator and
    is rejected with a clear message instead of a conversion error.
    """

    #: Required for allow_with_edits: the complete replacement input.
    edited_input: dict[str, Any] | None = None
    #: The named approver this decision counts for (quorum requests).
    approver: str | None = None
    #: Allow the same call again (scope, ttl); validated by the API.
    remember: RememberSpec | None = None
    #: That parkgate's API sent this decision (parkgate.approvals.proof, kind "decide"):
    #: set by the sender (DurableDispatcher.send_decision), checked by the call
    #: workflow; every other field is covered by it.
    proof: Proof | None = None

    def record(self, decided_at: datetime, approved_hash: str | None,
               remember: RememberSpec | None = None) -> DecisionRecord:
        """This decision as the winner records it."""
        return DecisionRecord.model_validate(
            self.decision_fields() | {"decided_at": decided_at, "approved_hash": approved_hash,
                                      "remember": remember}
        )


class DecideKeywords(TypedDict, total=False):
    """DecideInput's fields beside the request and the decision, as keyword
    arguments (`DurableDispatcher.decide`): typed for callers, and held to
    DecideInput by a test so the two cannot drift."""

    reason: str | None
    decided_by: str | None
    via: str | None
    edited_input: dict[str, Any] | None
    principal_id: str | None
    claimed_name: str | None
    self_approved: bool
    identity: dict[str, Any] | None
    approver: str | None
    remember: RememberSpec | None


#: The ApplicationError type of a refused `decide` update.
REJECTED_ERROR_TYPE = "DecisionRejected"


class RejectReason(StrEnum):
    """Why a decision was not applied (stable values: they cross processes)."""

    #: The request id is not this call's current request.
    UNKNOWN_REQUEST = "unknown_request"
    #: Someone decided first; the standing decision travels with the refusal.
    ALREADY_DECIDED = "already_decided"
    #: The request expired before the decision arrived.
    EXPIRED = "expired"
    #: The call was cancelled while it waited.
    CANCELLED = "cancelled"
    #: The call is past waiting for another reason (running, ended, unknown).
    NOT_WAITING = "not_waiting"
    #: The decision is not one of DECISIONS.
    INVALID_DECISION = "invalid_decision"
    #: allow_with_edits without edited_input.
    EDITS_MISSING = "edits_missing"
    #: The edited input fails the tool's schema or scope checks.
    EDITS_INVALID = "edits_invalid"
    #: edited_input with a decision other than allow_with_edits.
    EDITS_NOT_ALLOWED = "edits_not_allowed"
    #: allow_with_edits where edits cannot be taken (quorum, sub-call step).
    EDITS_UNAVAILABLE = "edits_unavailable"
    #: The request names its approvers and the decider is not one of them.
    NOT_A_NAMED_APPROVER = "not_a_named_approver"
    #: This approver's approval is already counted toward the quorum.
    QUORUM_DUPLICATE = "quorum_duplicate"
    #: A composed tool's step cannot collect a quorum above one.
    QUORUM_UNSUPPORTED = "quorum_unsupported"
    #: This dispatcher has no store to decide sub-calls in.
    NO_STORE = "no_store"
    #: The decision carries no valid proof that parkgate's API sent it (a
    #: direct Temporal client, a forged or altered message, an unknown key id).
    UNPROVEN = "unproven"

    @property
    def invalid_input(self) -> bool:
        """The decision as sent can never apply: the decider should change it."""
        return self in _INVALID_INPUT


_INVALID_INPUT = frozenset({
    RejectReason.INVALID_DECISION, RejectReason.EDITS_MISSING, RejectReason.EDITS_INVALID,
    RejectReason.EDITS_NOT_ALLOWED, RejectReason.EDITS_UNAVAILABLE,
})


@dataclass(frozen=True)
class Rejection:
    """A refused decision: the machine-readable reason and the text for people."""

    reason: RejectReason
    message: str


def no_longer_waiting(status: str) -> Rejection:
    """The refusal of a decision on a call in `status` (no longer parked)."""
    reason = {
        "expired": RejectReason.EXPIRED,
        "cancelled": RejectReason.CANCELLED,
    }.get(status, RejectReason.NOT_WAITING)
    return Rejection(reason, f"the call is no longer waiting for approval (status {status})")


def already_decided(decision: str, decided_by: str | None) -> Rejection:
    who = f" by {decided_by}" if decided_by else ""
    return Rejection(RejectReason.ALREADY_DECIDED, f"already decided: {decision}{who}")


def invalid_decision(decision: str) -> Rejection:
    return Rejection(
        RejectReason.INVALID_DECISION,
        f"invalid decision {decision!r}; expected one of {', '.join(DECISIONS)}",
    )


def invalid_edits(error: str) -> Rejection:
    return Rejection(RejectReason.EDITS_INVALID, f"edited input is not valid: {error}")


def unproven(problem: str) -> Rejection:
    """The refusal of a decision whose proof does not hold (parkgate.approvals.proof)."""
    return Rejection(RejectReason.UNPROVEN, f"decision refused: {problem}")


def reason_of(value: object) -> RejectReason | None:
    """A reason read from another process (None when absent or unknown: a newer
    sender, or one from before reasons)."""
    try:
        return RejectReason(value) if isinstance(value, str) else None
    except ValueError:
        return None
