"""Request and response models of the HTTP API (they make the OpenAPI document)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from parkgate.api.approval_links import named_approvers, quorum_of
from parkgate.approvals.decisions import DecisionMade, DecisionRecord
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.clients.client_tools import MAX_CLIENT_TOOLS, ClientToolSpec
from parkgate.models import ContentBlock, JsonInput, TextBlock, ToolResultBlock, ToolUseBlock
from parkgate.rules.remember_spec import MAX_TTL_SECONDS, MIN_TTL_SECONDS
from parkgate.rules.remembered import RememberedFields
from parkgate.store.results import CallRecord

#: An id the API accepts in a path or a hook (a session, turn, tool_use, request).
ID_RE = r"^[A-Za-z0-9_.:\-]{1,200}$"
_ID = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-]+$")


class SessionIn(BaseModel):
    """Register a session and the workspace its calls are confined to."""

    model_config = ConfigDict(extra="forbid")

    session_id: str = _ID
    workspace_path: str = Field(min_length=1, max_length=4096)
    kind: Literal["main", "worker"] = "main"
    client_tools: list[ClientToolSpec] = Field(
        default_factory=list, max_length=MAX_CLIENT_TOOLS,
        description="Tools this session's client runs itself: parkgate classifies, parks "
        "and releases their calls; the client claims, runs and reports the outcome.",
    )
    worker_group: str | None = Field(
        default=None,
        max_length=64,
        description="The worker group whose hosts have this workspace (a name from "
        "the server's `worker_groups`); default: the group whose root holds "
        "workspace_path, else none (any worker).",
    )


class SessionOut(BaseModel):
    session_id: str
    workspace_path: str
    kind: str
    created_at: datetime
    project: str = "default"
    worker_group: str | None = None
    client_tools: list[dict[str, Any]] | None = None


def stored_fields(row: CallRecord, model: type[BaseModel]) -> dict[str, Any]:
    """What `model` shows of a stored call row: every field the two share by name.

    The one mapping from a `tool_calls` row to the API's call models
    (CallResource, CallSummary): no field-by-field copies to keep in step.
    """
    return {name: getattr(row, name) for name in model.model_fields
            if name in CallRecord.model_fields}


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

    @classmethod
    def from_row(
        cls,
        row: CallRecord,
        *,
        approval: ApprovalRecord | None = None,
        approval_url: str | None = None,
        turn_id: str | None = None,
    ) -> CallResource:
        """The call as the store has it: its row and, for a live call, its
        approval request (expiry, named approvers and, once decided, their
        votes) and the request's link (shown only while the row says parked)."""
        fields = stored_fields(row, cls)
        fields["turn_id"] = row.turn_id or turn_id
        fields["input"] = None  # a released input comes from its workflow (redacted here)
        if not row.status.terminal:
            fields["result"] = None  # only a finished call has a result
        if approval is not None:
            fields["expires_at"] = approval.expires_at
            if named := named_approvers(approval):
                fields.update(approvers=named, quorum=quorum_of(approval), votes=approval.votes)
        url = approval_url if row.status == CallStatus.PARKED else None
        return cls(
            **fields,
            finished=row.status.terminal,
            approval_url=url,
            links=CallLinks.of(row.session_id, row.tool_use_id, url),
        )


class BatchIn(BaseModel):
    """One assistant message's tool_use blocks, run as one turn."""

    model_config = ConfigDict(extra="forbid")

    calls: list[ToolUseBlock] = Field(min_length=1, max_length=100)


class BatchOut(BaseModel):
    session_id: str
    turn_id: str
    finished: bool
    calls: list[CallResource]


class ConfirmationIn(BaseModel):
    """The spec's confirmation body (plus who decided and optional edits)."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["allow", "deny", "allow_with_edits"]
    reason: str | None = Field(default=None, max_length=4000)
    decided_by: str | None = Field(default=None, max_length=200)
    edited_input: JsonInput | None = None
    #: Allow the same call again (allow decisions only; not for quorum requests).
    remember: RememberIn | None = None


class RememberIn(BaseModel):
    """Remember an allow: the same tool with the same input (for a shell
    command: the same command prefix) in this session or workspace, for a time."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["session", "workspace"]
    ttl_seconds: int = Field(
        ge=MIN_TTL_SECONDS, le=MAX_TTL_SECONDS,
        description=f"how long the rule lasts ({MIN_TTL_SECONDS} s .. 30 days)",
    )
    command_prefix: str | None = Field(
        default=None, max_length=4000,
        description="shell tools: the word prefix to allow (default: the whole command)",
    )


class RememberedOut(RememberedFields):
    """A remembered decision; `rule` is how calls it approves name it."""

    id: str
    rule: str
    active: bool


class RememberedListOut(BaseModel):
    items: list[RememberedOut]


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


class TimelineEventOut(EventOut):
    since_previous_ms: float | None = None
    since_start_ms: float = 0.0


class CallEventsOut(BaseModel):
    session_id: str
    tool_use_id: str
    events: list[TimelineEventOut]


class CallSummary(BaseModel):
    """A call as listed by the audit query."""

    session_id: str
    tool_use_id: str
    turn_id: str | None = None
    tool_name: str | None = None
    side_effects: str | None = None
    status: CallStatus
    rule: str | None = None
    request_id: str | None = None
    decision: str | None = None
    decided_by: str | None = None
    via: str | None = None
    principal_id: str | None = None
    claimed_name: str | None = None
    self_approved: bool | None = None
    reason: str | None = None
    error_class: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    duration_ms: float | None = None

    @classmethod
    def from_row(cls, row: CallRecord) -> CallSummary:
        return cls.model_validate(stored_fields(row, cls))


class CallPageOut(BaseModel):
    items: list[CallSummary]
    next_cursor: str | None = Field(default=None, description="Pass as `after` for the next page.")


class HealthOut(BaseModel):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict)


class ClaimIn(BaseModel):
    """Claim a released call (optional body)."""

    model_config = ConfigDict(extra="forbid")

    lease_seconds: float | None = Field(
        default=None, gt=0, le=86_400 * 7,
        description="Lease asked for; capped by the server's client_lease_max_seconds.",
    )


class StartIn(BaseModel):
    """Start a reservation (the claim's `claim_id`): the client runs the call now."""

    model_config = ConfigDict(extra="forbid")

    claim_id: str = Field(min_length=1, max_length=128)


class OutcomeIn(BaseModel):
    """What the client's run returned."""

    model_config = ConfigDict(extra="forbid")

    content: str | list[ContentBlock] = Field(
        default_factory=list, description="A string, or content blocks as in a tool result.")
    is_error: bool = False
    input_sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                              description="SHA-256 hex of the input the client ran.")

    def blocks(self) -> list[Any]:
        if isinstance(self.content, str):
            return [TextBlock(text=self.content)]
        return list(self.content)
