"""Request and response models of the HTTP API (they make the OpenAPI document).

The response models an agent client reads (sessions, calls, decisions, events)
live in `parkgate.calls.wire`, free of the server, and are re-exported here;
this module adds the request models, the audit's views and the mappings from
stored rows (`call_resource`, `CallSummary.from_row`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parkgate.api.shared.approval_links import named_approvers, quorum_of
from parkgate.calls.cancellation import MAX_REASON_CHARS, check_reason
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.calls.wire import (
    BatchOut,
    CallLinks,
    CallResource,
    CancelOut,
    ConfirmationOut,
    DecisionOut,
    EventOut,
    SessionCancelOut,
    SessionOut,
    ToolsOut,
)
from parkgate.client_tools.declared import MAX_CLIENT_TOOLS, ClientToolSpec
from parkgate.models import ContentBlock, JsonInput, TextBlock, ToolUseBlock
from parkgate.rules.remember_spec import MAX_TTL_SECONDS, MIN_TTL_SECONDS
from parkgate.rules.remembered import RememberedFields
from parkgate.store.results import CallRecord

__all__ = [
    "ID_RE", "BatchIn", "BatchOut", "CallEventsOut", "CallLinks", "CallPageOut",
    "CallResource", "CallSummary", "CancelIn", "CancelOut", "ClaimIn", "ConfirmationIn",
    "ConfirmationOut", "DecisionOut", "EventOut", "HealthOut", "OutcomeIn",
    "RememberIn", "RememberedListOut", "RememberedOut", "SessionCancelOut", "SessionIn",
    "SessionOut", "StartIn", "TimelineEventOut", "ToolsOut", "call_resource", "stored_fields",
]

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


def stored_fields(row: CallRecord, model: type[BaseModel]) -> dict[str, Any]:
    """What `model` shows of a stored call row: every field the two share by name.

    The one mapping from a `tool_calls` row to the API's call models
    (CallResource, CallSummary): no field-by-field copies to keep in step.
    """
    return {name: getattr(row, name) for name in model.model_fields
            if name in CallRecord.model_fields}


def call_resource(
    row: CallRecord,
    *,
    approval: ApprovalRecord | None = None,
    approval_url: str | None = None,
    turn_id: str | None = None,
) -> CallResource:
    """The call as the store has it: its row and, for a live call, its
    approval request (expiry, named approvers and, once decided, their
    votes) and the request's link (shown only while the row says parked)."""
    fields = stored_fields(row, CallResource)
    fields["turn_id"] = row.turn_id or turn_id
    fields["input"] = None  # a released input comes from its workflow (redacted here)
    if not row.status.terminal:
        fields["result"] = None  # only a finished call has a result
    if approval is not None:
        fields["expires_at"] = approval.expires_at
        if named := named_approvers(approval):
            fields.update(approvers=named, quorum=quorum_of(approval), votes=approval.votes)
    url = approval_url if row.status == CallStatus.PARKED else None
    return CallResource(
        **fields,
        finished=row.status.terminal,
        approval_url=url,
        links=CallLinks.of(row.session_id, row.tool_use_id, url),
    )


class BatchIn(BaseModel):
    """One assistant message's tool_use blocks, run as one turn."""

    model_config = ConfigDict(extra="forbid")

    calls: list[ToolUseBlock] = Field(min_length=1, max_length=100)


class ConfirmationIn(BaseModel):
    """The spec's confirmation body (plus who decided and optional edits)."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["allow", "deny", "allow_with_edits"]
    reason: str | None = Field(default=None, max_length=4000)
    decided_by: str | None = Field(default=None, max_length=200)
    edited_input: JsonInput | None = None
    #: Allow the same call again (allow decisions only; not for quorum requests).
    remember: RememberIn | None = None


class CancelIn(BaseModel):
    """An optional cancel body: why (recorded with who cancelled, from the key)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None, max_length=MAX_REASON_CHARS,
        description="why the call is cancelled: recorded in its result text and "
        "tool.failed event (no control characters)",
    )

    @field_validator("reason")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        return check_reason(value)


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
