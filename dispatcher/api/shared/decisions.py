"""How every interface answers a decision: one mapping from result to answer.

The confirmations API, approval links, the inbox, Slack and the CLI all send
the same `decide` update; what the decider is told follows from the result's
`RejectReason` here, never from its message's wording. Each interface renders
the answer its own way (JSON error, HTML page, flash, Slack text) but with the
status, code and message chosen here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parkgate.approvals.decisions import RejectReason
from parkgate.durable.payloads import DecideResult

Outcome = Literal["won", "counted", "lost"]


@dataclass(frozen=True)
class Refusal:
    """A refused decision as an HTTP answer."""

    status: int
    #: The API's error code (`error.code` in the JSON body).
    code: str
    message: str
    reason: RejectReason | None

    @property
    def already_decided(self) -> bool:
        """Someone decided first: show the standing decision."""
        return self.code == "already_decided"

    @property
    def fix_input(self) -> bool:
        """The decision as sent can never apply: show the form again."""
        return self.code == "invalid_decision"


#: RejectReason -> (HTTP status, error code). Reasons not listed (and a result
#: without a reason, from a worker that predates them) are 409 not_waiting.
REFUSALS: dict[RejectReason, tuple[int, str]] = {
    RejectReason.ALREADY_DECIDED: (409, "already_decided"),
    RejectReason.INVALID_DECISION: (422, "invalid_decision"),
    RejectReason.EDITS_MISSING: (422, "invalid_decision"),
    RejectReason.EDITS_INVALID: (422, "invalid_decision"),
    RejectReason.EDITS_NOT_ALLOWED: (422, "invalid_decision"),
    RejectReason.EDITS_UNAVAILABLE: (422, "invalid_decision"),
    # Same answer as the API's own check of a key that is no named approver.
    RejectReason.NOT_A_NAMED_APPROVER: (403, "forbidden"),
    RejectReason.QUORUM_DUPLICATE: (409, "not_waiting"),
    RejectReason.QUORUM_UNSUPPORTED: (409, "not_waiting"),
    RejectReason.UNKNOWN_REQUEST: (409, "not_waiting"),
    RejectReason.EXPIRED: (409, "not_waiting"),
    RejectReason.CANCELLED: (409, "not_waiting"),
    RejectReason.NOT_WAITING: (409, "not_waiting"),
    RejectReason.NO_STORE: (409, "not_waiting"),
    # The worker refused this API's own proof: API and workers do not share
    # the payload keys (docs/OPERATIONS.md "Only the API decides").
    RejectReason.UNPROVEN: (503, "unproven"),
}


_NOT_WAITING = (409, "not_waiting")


def outcome(result: DecideResult) -> Outcome:
    """What the decision did: decided the call, counted toward a quorum, or lost."""
    if not result.accepted:
        return "lost"
    return "counted" if result.winner is None else "won"


def answer_refused(result: DecideResult) -> Refusal:
    """The answer to a refused decision (`result.accepted` is False).

    A refusal that carries a winner is answered with it (409 already_decided)
    whatever its reason: the decider learns the decision that stands.
    """
    if result.winner is not None:
        message = result.message or f"already decided: {result.winner.decision}"
        return Refusal(409, "already_decided", message, result.reason)
    status, code = _NOT_WAITING if result.reason is None else REFUSALS.get(
        result.reason, _NOT_WAITING)
    return Refusal(status, code, result.message or "the call is no longer waiting", result.reason)
