"""The HTTP API's views of sessions, calls and decisions, as both sides read them.

The server answers with these models and the agent client (`parkgate.agent_client`)
parses them, so they live here, in the pure domain, with no server dependency:
an agent embedding the client imports pydantic and parkgate's domain, not FastAPI,
Temporal or SQL. `parkgate.api.shared.schemas` re-exports them beside the request models
and the server-side mappings from stored rows (`call_resource`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parkgate.approvals.decisions import DecisionMade, DecisionRecord
from parkgate.calls.records import CallStatus
from parkgate.models import ToolResultBlock


class SessionOut(BaseModel):
    session_id: str
    workspace_path: str
    kind: str
    created_at: datetime
    project: str = "default"
    worker_group: str | None = None
    client_tools: list[dict[str, Any]] | None = None


class CallLinks(BaseModel):
    self: str
    events: str
    cancel: str
    approval: str | None = None

    @classmethod
    def of(cls, session_id: str, tool_use_id: str, approval: str | None = None) -> CallLinks:
        base = f"/v1/sessions/{session_id}/tool-calls/{tool_use_id}"
        return cls(self=base, events=f"{base}/events", cancel=f"{base}/cancel",
                   approval=approval)


class CallResource(BaseModel):
    """Where one tool call is: status, approval link while parked, result when finished."""

    tool_use_id: str
    session_id: str
    turn_id: str | None = None
    tool_name: str | None = None
    side_effects: str | None = None
    status: CallStatus
    finished: bool = False
    approval_url: str | None = Field(
        default=None,
        description="Only while parked, and only for a key that may decide this call.",
    )
    request_id: str | None = None
    expires_at: datetime | None = None
    waiting_for: str | None = Field(
        default=None,
        description="What the call waits for before it can go on, e.g. "
        "'worker group gpu-1' while no worker of the session's group has picked it up.",
    )
    rule: str | None = None
    decision: str | None = None
    decided_by: str | None = Field(
        default=None, description="The authenticated decider's name (key or named approver)."
    )
    via: str | None = None
    principal_id: str | None = Field(
        default=None, description='"key:<id>" or "approver:<name>"; None for a generic link.'
    )
    claimed_name: str | None = Field(
        default=None, description="A name the decider typed or sent: a claim, not an identity."
    )
    self_approved: bool | None = None
    identity: dict[str, Any] | None = Field(
        default=None, description="How the decider was identified: "
        '{"method": "oidc", "issuer", "subject", "email"}, {"method": "key", "key_id"}, '
        '{"method": "slack", "slack_user"}, {"method": "personal_link", "approver"} or '
        '{"method": "link"} (docs/APPROVERS.md).',
    )
    approvers: list[str] | None = Field(
        default=None, description="Named approvers of the request (quorum rules)."
    )
    quorum: int | None = None
    votes: list[str] | None = Field(
        default=None, description="Named approvers who have allowed so far."
    )
    approver_links: dict[str, str] | None = Field(
        default=None, description="Named approvers' personal links (admin keys only)."
    )
    reason: str | None = None
    error_class: str | None = None
    result: ToolResultBlock | None = Field(default=None, description="Only when finished.")
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    problem: str | None = Field(
        default=None,
        description="Set while the call's workflow task keeps failing (docs/DURABLE.md): "
        "the cause, the failed attempts, and whether a deploy may heal it.",
    )
    input: dict[str, Any] | None = Field(
        default=None, description="Client tools, released or claimed: the input to run.")
    input_sha256: str | None = Field(
        default=None, description="SHA-256 hex of the released input's canonical JSON.")
    released_at: datetime | None = None
    claimed_by: str | None = Field(default=None, description='"key:<id>" of the claimer.')
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    claim_id: str | None = Field(
        default=None, description="With `claim_won`: the reservation to start "
        "(`POST .../start`) before running `input`.")
    claim_won: bool | None = Field(
        default=None, description="On a submit with `claim=true`: true when this request "
        "holds the claim (run `input`, then report the outcome); unset otherwise.")
    links: CallLinks


class BatchOut(BaseModel):
    session_id: str
    turn_id: str
    finished: bool
    calls: list[CallResource]


# The decision as the API shows it: the domain's decision (parkgate.approvals.decisions)
# with when it was made and the quorum's votes; no docstring, so the OpenAPI
# document stays as it was.
class DecisionOut(DecisionMade):
    decided_at: datetime | None = None
    votes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, record: DecisionRecord) -> DecisionOut:
        """The API's view of a recorded decision (the same fields, by name)."""
        return cls.model_validate(record.model_dump(include=set(cls.model_fields)))


class ConfirmationOut(BaseModel):
    """200: your decision won. 202: your approval counts toward a quorum that is
    not met yet. (A 409 carries the winner in error.details.)"""

    accepted: bool
    decision: DecisionOut | None = None
    message: str = ""
    votes: list[str] = Field(default_factory=list)
    quorum: int = 1


class CancelOut(BaseModel):
    cancelled: bool
    status: CallStatus | None = None
    message: str = ""


class SessionCancelOut(BaseModel):
    session_id: str
    cancelled: int


class ToolsOut(BaseModel):
    session_id: str
    format: Literal["canonical", "openai", "anthropic"]
    tools: list[dict[str, Any]]


class EventOut(BaseModel):
    """One recorded tool.* event on the wire; `seq` is the SSE id (Last-Event-ID).

    The API's view of a store EventRecord (parkgate.calls.events.ToolEvent plus `seq`):
    without the chain fields, with the approval link, and with plain strings so
    the published schema stays the same as the event catalog grows.
    """

    seq: int
    event_id: str
    type: str
    session_id: str
    turn_id: str
    tool_use_id: str
    tool_name: str
    side_effects: str | None = None
    at: datetime
    request_id: str | None = None
    error_class: str | None = None
    message: str | None = None
    parent_tool_use_id: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    #: tool.confirmation_requested only: the signed approval link, re-derived
    #: on read (the store keeps only the token's hash).
    approval_url: str | None = None
