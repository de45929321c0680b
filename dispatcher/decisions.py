"""A human's decision on a parked call: its values, and why one can be refused.

Every place that refuses a decision (the call workflow's `decide` validator
and handler, the sub-call path in the store, the durable client) says why with
a `RejectReason`, so interfaces map a refusal to an answer by its reason, never
by the wording of its message. The reason travels with the update's rejection
(`ApplicationError.details[1]`) and in `DecideResult.reason`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

Decision = Literal["allow", "deny", "allow_with_edits"]
DECISIONS: tuple[str, ...] = ("allow", "deny", "allow_with_edits")

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


def reason_of(value: object) -> RejectReason | None:
    """A reason read from another process (None when absent or unknown: a newer
    sender, or one from before reasons)."""
    try:
        return RejectReason(value) if isinstance(value, str) else None
    except ValueError:
        return None
