"""Approval requests of composed tools' sub-calls on the durable path.

A non-atomic composed tool runs inside ONE execute activity; when one of its
sub-calls needs approval, the activity parks it there (see
`activities/subcall_approver.py`): it stores an approval request for the sub-call and
waits for a decision in the history store. There is no workflow for a
sub-call, so a decision on such a request is written straight to the store,
first write wins (`Repository.decide_approval`); the activity sees it on its
next poll. This module holds what both sides share: how a sub-call request is
recognised and named, and how a decision on one is applied.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from parkgate.approvals.decisions import (
    DecideInput,
    Rejection,
    RejectReason,
    already_decided,
    invalid_decision,
    no_longer_waiting,
)
from parkgate.calls.records import ApprovalRecord
from parkgate.durable.payloads import DecideResult
from parkgate.models import utcnow

if TYPE_CHECKING:
    from parkgate.store.approval_store import ApprovalStore

#: Decisions a human may give a sub-call (no edits: see docs/DURABLE.md).
SUB_CALL_DECISIONS = ("allow", "deny")
#: Stored when no decision arrived in time (same word as a parked call's expiry).
EXPIRED = "expired"
#: Text of a decision refused because it carries edits.
NO_EDITS = (
    "allow_with_edits is not available for a step of a composed tool; "
    "approve or deny it (or deny and let the agent retry with other input)"
)


def can_decide(store: object) -> bool:
    """True when `store` offers what sub-call approvals need (the Repository's
    `ApprovalStore` part: get_approval, decide_approval)."""
    return callable(getattr(store, "get_approval", None)) and callable(
        getattr(store, "decide_approval", None)
    )


def sub_call_request_id(session_id: str, tool_use_id: str) -> str:
    """The one request id of a sub-call's approval (deterministic: a retried
    store write or a re-run of the same sub-call finds the same request)."""
    raw = f"parkgate.subcall\x1f{session_id}\x1f{tool_use_id}"
    return "sub-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:28]


def parent_of(record: ApprovalRecord) -> str | None:
    """The parent call's tool_use_id when `record` is a sub-call's request."""
    parent = (record.info or {}).get("parent_tool_use_id")
    return parent if isinstance(parent, str) and parent else None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def is_past_expiry(record: ApprovalRecord, now: datetime | None = None) -> bool:
    return record.expires_at is not None and (now or utcnow()) >= _aware(record.expires_at)


def problem(record: ApprovalRecord, inp: DecideInput) -> Rejection | None:
    """Why `inp` cannot decide the sub-call request `record` (None when it can).

    Same checks, reasons and wording as the call workflow's `decide` validator.
    """
    if record.decision is not None:
        if record.decision == EXPIRED:
            return no_longer_waiting(EXPIRED)
        return already_decided(record.decision, record.decided_by)
    if is_past_expiry(record):
        return no_longer_waiting(EXPIRED)
    if inp.decision == "allow_with_edits":
        return Rejection(RejectReason.EDITS_UNAVAILABLE, NO_EDITS)
    if inp.decision not in SUB_CALL_DECISIONS:
        return invalid_decision(inp.decision)
    if inp.edited_input is not None:
        return Rejection(RejectReason.EDITS_NOT_ALLOWED,
                         "edited_input is only allowed with allow_with_edits")
    return _named_problem(record, inp)


def _named_problem(record: ApprovalRecord, inp: DecideInput) -> Rejection | None:
    """A step with named approvers takes one of them; a quorum above one is not
    counted for steps (the decision is refused, so the step can only expire or
    be denied: never run on fewer approvals than configured)."""
    info = record.info or {}
    named = [str(n) for n in info.get("approvers") or []]
    if not named:
        return None
    if inp.approver not in named:
        return Rejection(RejectReason.NOT_A_NAMED_APPROVER,
                         "this request is decided by its named approvers: " + ", ".join(named))
    quorum = info.get("quorum") or 1
    if inp.decision != "deny" and isinstance(quorum, int) and quorum > 1:
        return Rejection(RejectReason.QUORUM_UNSUPPORTED,
                         f"a step of a composed tool cannot collect {quorum} approvals; "
                         "deny it, or let it expire")
    return None


async def decide(
    store: ApprovalStore, record: ApprovalRecord, inp: DecideInput
) -> DecideResult:
    """Apply a human's decision to a sub-call request: first write wins in the store."""
    refused = problem(record, inp)
    if refused is not None:
        return DecideResult.refused(refused, record.decision_record())
    won, stored = await store.decide_approval(
        record.request_id, inp.decision, inp.decided_by, inp.via, inp.reason,
        principal=inp.principal(),
    )
    if won:
        return DecideResult(
            accepted=True, winner=stored.decision_record(), message="decision applied"
        )
    lost = problem(stored, inp) or already_decided(str(stored.decision), stored.decided_by)
    return DecideResult.refused(lost, stored.decision_record())

