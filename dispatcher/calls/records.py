"""Data the durable path hands to the history store, and the store's contract.

Activities depend on the `HistoryStore` protocol only; the SQLAlchemy
repository in this package implements it. Every write is idempotent: events
on their deterministic `event_id`, calls on (session_id, tool_use_id),
approvals on `request_id`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, Field

from parkgate.approvals.decisions import (
    DECISIONS,
    DecisionFields,
    DecisionRecord,
    decider_label,
)
from parkgate.calls.events import ToolEvent
from parkgate.models import SideEffects, ToolErrorClass, ToolResultBlock, ToolUseBlock


class CallStatus(StrEnum):
    QUEUED = "queued"
    PARKED = "parked"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    #: Client-executed calls (parkgate.client_tools.declared): approved and handed to the
    #: client to run; claimed by one client under a lease; the lease ended with
    #: no outcome reported (never "failed": the tool may well have run).
    RELEASED = "released"
    CLAIMED = "claimed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    #: Released, and no client claimed it in time (client_unclaimed_seconds):
    #: it never ran and never will.
    UNCLAIMED = "unclaimed"

    @property
    def terminal(self) -> bool:
        return self not in LIVE_STATUSES

    @property
    def answerable(self) -> bool:
        """A long-poll answers on it: a final status, or `released` (the client's
        turn to claim and run the call)."""
        return self.terminal or self == CallStatus.RELEASED


#: Statuses of a call that has not ended.
LIVE_STATUSES = (CallStatus.QUEUED, CallStatus.PARKED, CallStatus.RUNNING,
                 CallStatus.RELEASED, CallStatus.CLAIMED)


def status_for(error_class: ToolErrorClass | None) -> CallStatus:
    """The call-row status an outcome with this error class ends in."""
    if error_class is None:
        return CallStatus.SUCCEEDED
    return {
        ToolErrorClass.CANCELLED: CallStatus.CANCELLED,
        ToolErrorClass.USER_DENIED: CallStatus.DENIED,
        ToolErrorClass.PERMISSION_DENIED: CallStatus.DENIED,
        ToolErrorClass.CONFIRMATION_TIMEOUT: CallStatus.EXPIRED,
    }.get(error_class, CallStatus.FAILED)


class CallRef(BaseModel):
    """Which call, and which run of its workflow, a store write is about.

    Identity only: what the workflow knows and an activity cannot read back
    (the run's start is when the call was submitted). The durable path hands
    the store a ref plus facts (a verdict, a decision, an outcome); the store
    side turns them into row values (`parkgate.calls.rows`), so no payload in
    Temporal history carries a call row.
    """

    session_id: str
    tool_use_id: str
    turn_id: str | None = None
    tool_name: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None


class CallColumns(BaseModel):
    """A call's state as one `tool_calls` row holds it: defined once.

    The store's write (`CallUpdate`) and read (`store.results.CallRecord`)
    shapes derive from it, and the API's call resource and summary show its
    columns under the same names; a call's end (`CallEnd`, what the workflow
    returns) is a subset of it. `tests/store/test_call_columns.py` holds it
    to the table. Stored values are plain strings; writes narrow
    `side_effects` and `error_class` to their enums.
    """

    turn_id: str | None = None
    tool_name: str | None = None
    side_effects: str | None = None
    input: dict[str, Any] | None = None  # redacted before storage
    input_hash: str | None = None
    verdict: str | None = None  # execute | deny | needs_approval
    rule: str | None = None
    request_id: str | None = None
    decision: str | None = None
    decided_by: str | None = None
    via: str | None = None
    reason: str | None = None
    #: The authenticated decider ("key:<id>", "approver:<name>"); the typed
    #: name of a generic link is only a claim.
    principal_id: str | None = None
    claimed_name: str | None = None
    self_approved: bool | None = None
    #: How the decider was identified (parkgate.approvals.identity).
    identity: dict[str, Any] | None = None
    error_class: str | None = None
    result: ToolResultBlock | None = None  # what the model got (truncated)
    full_output: dict[str, Any] | None = None  # ToolOutput dump, untruncated
    parent_tool_use_id: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None

    def decider(self) -> str | None:
        """Who decided, as listings show it (`alice (unverified)` for a name typed
        on a generic link: parkgate.approvals.decisions.decider_label)."""
        return decider_label(self.decided_by, self.claimed_name)


class CallUpdate(CallColumns):
    """A partial update of one `tool_calls` row; None fields are left unchanged.

    The store's write shape, built on the store side of the durable path
    (`parkgate.calls.rows`), never carried in a workflow payload any more
    (older histories still hold some: activities accept them).
    """

    session_id: str
    tool_use_id: str
    status: CallStatus | None = None
    side_effects: SideEffects | None = None
    error_class: ToolErrorClass | None = None

    @classmethod
    def of(cls, ref: CallRef, **changes: Any) -> CallUpdate:
        """The update of `ref`'s row: its ids plus `changes` (None = unchanged)."""
        return cls.model_validate({**ref.model_dump(exclude_none=True), **changes})


class CallEnd(BaseModel):
    """How a call ended: what the model got and the status for humans (the
    workflow's `CallOutcome` and the store's stored final state share it)."""

    result: ToolResultBlock
    status: CallStatus
    error_class: ToolErrorClass | None = None
    duration_ms: float | None = None


class RecordedFinish(CallEnd):
    """The final state a call already has in the store (see
    Repository.record_unless_finished): what a lost execute activity recorded."""


class CallOpening(BaseModel):
    """What classification said of a call: the facts of its first row.

    Sent only where the store may not have seen the call yet (a denied call's
    only write, the record of a call that never parked); activities that hold
    the prepared call derive it themselves (`parkgate.calls.rows.opening_of`).
    """

    call: ToolUseBlock  # as classified (hooks may have rewritten the input)
    verdict: str | None = None  # execute | deny | needs_approval
    input_hash: str | None = None
    side_effects: SideEffects | None = None
    rule: str | None = None
    #: A remembered rule approved it: who made the rule.
    remembered_by: str | None = None
    remembered_principal: str | None = None


class CallFacts(BaseModel):
    """What the workflow tells the store in one write: ids and facts, no row.

    The store side turns it into the row (`parkgate.calls.rows.row_for`); the
    decision columns come from the approval the same write carries.
    """

    ref: CallRef
    status: CallStatus
    opening: CallOpening | None = None
    request_id: str | None = None
    #: The input that runs, where this write must state it: an approver's edit
    #: (allow_with_edits, with its hash), or a decision to remember (the rule
    #: is made for this input).
    input: dict[str, Any] | None = None
    input_hash: str | None = None
    end: CallEnd | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: The untruncated output the execute activity could not store (outage).
    full_output: dict[str, Any] | None = None


class ApprovalRecord(DecisionFields):
    """One approval request (a parked call waiting for a human).

    Its decision fields (decision, reason, decided_by, via, principal_id,
    claimed_name, self_approved) are `DecisionFields`: flat, None until decided.
    """

    request_id: str
    session_id: str
    turn_id: str
    tool_use_id: str
    tool_name: str
    token_hash: str
    input_hash: str
    requested_at: datetime
    expires_at: datetime | None = None  # None = never
    info: dict[str, Any] = Field(default_factory=dict)  # ApprovalInfo dump
    decided_at: datetime | None = None
    #: Named approvers who allowed (quorum requests).
    votes: list[str] | None = None

    def decision_record(self) -> DecisionRecord | None:
        """The stored decision as the winner's record (None if undecided or not a
        human decision, e.g. "expired")."""
        if self.decision not in DECISIONS:
            return None
        return DecisionRecord.model_validate(self.decision_fields() | {
            "self_approved": bool(self.self_approved),
            "decided_at": _aware(self.decided_at or self.requested_at),
            "approved_hash": self.input_hash if self.decision != "deny" else None,
            "votes": list(self.votes or []),
        })


def _aware(value: datetime) -> datetime:
    """Rows read back from SQLite carry naive UTC datetimes."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class HistoryStore(Protocol):
    """What the durable path needs from the history store."""

    async def apply(self, events: list[ToolEvent], update: CallUpdate | None = None) -> None:
        """Append events (skipping ids already stored) and update the call row,
        in one transaction."""
        ...

    async def save_approval(self, approval: ApprovalRecord) -> None:
        """Insert or update an approval request (idempotent on request_id)."""
        ...
