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

from parkgate.decisions import DECISIONS, DecisionFields, DecisionRecord
from parkgate.events import ToolEvent
from parkgate.models import SideEffects, ToolErrorClass, ToolResultBlock


class CallStatus(StrEnum):
    QUEUED = "queued"
    PARKED = "parked"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self not in (CallStatus.QUEUED, CallStatus.PARKED, CallStatus.RUNNING)


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


class CallUpdate(BaseModel):
    """A partial update of one `tool_calls` row; None fields are left unchanged."""

    session_id: str
    tool_use_id: str
    turn_id: str | None = None
    tool_name: str | None = None
    side_effects: SideEffects | None = None
    input: dict[str, Any] | None = None  # redacted before storage
    input_hash: str | None = None
    status: CallStatus | None = None
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
    error_class: ToolErrorClass | None = None
    result: ToolResultBlock | None = None  # what the model got (truncated)
    full_output: dict[str, Any] | None = None  # ToolOutput dump, untruncated
    parent_tool_use_id: str | None = None
    workflow_id: str | None = None
    run_id: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None


class RecordedFinish(BaseModel):
    """The final state a call already has in the store (see
    Repository.record_unless_finished): what a lost execute activity recorded."""

    status: CallStatus
    error_class: ToolErrorClass | None = None
    result: ToolResultBlock
    duration_ms: float | None = None


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
