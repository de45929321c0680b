"""SQLAlchemy 2 typed models: the one schema both backends share.

The Alembic chain in migrations/ creates exactly these tables; a test runs
autogenerate against both backends and expects no difference.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from parkgate.store.types import BigIntId, CleanString, CleanText, JSONColumn, UTCDateTime

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = CleanString(200)  # session ids, tool_use ids, turn ids (ToolUseBlock.id max_length)
HASH = CleanString(64)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class ToolCall(Base):
    """One row per call: its current status and everything decided about it."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        UniqueConstraint("session_id", "tool_use_id"),
        Index("ix_tool_calls_created", "created_at", "id"),
        Index("ix_tool_calls_session_created", "session_id", "created_at", "id"),
        Index("ix_tool_calls_tool_created", "tool_name", "created_at", "id"),
        Index("ix_tool_calls_status_created", "status", "created_at", "id"),
        Index("ix_tool_calls_decided_by", "decided_by", "created_at"),
        Index("ix_tool_calls_turn", "turn_id"),
        Index("ix_tool_calls_finished", "finished_at"),
        Index("ix_tool_calls_parent", "session_id", "parent_tool_use_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ID)
    tool_use_id: Mapped[str] = mapped_column(ID)
    turn_id: Mapped[str | None] = mapped_column(ID)
    tool_name: Mapped[str | None] = mapped_column(CleanString(200))
    side_effects: Mapped[str | None] = mapped_column(CleanString(16))
    input: Mapped[dict[str, Any] | None] = mapped_column(JSONColumn)
    input_hash: Mapped[str | None] = mapped_column(HASH)
    status: Mapped[str] = mapped_column(CleanString(16))
    verdict: Mapped[str | None] = mapped_column(CleanString(32))
    rule: Mapped[str | None] = mapped_column(CleanText)
    request_id: Mapped[str | None] = mapped_column(ID)
    decision: Mapped[str | None] = mapped_column(CleanString(32))
    decided_by: Mapped[str | None] = mapped_column(CleanString(200))
    via: Mapped[str | None] = mapped_column(CleanString(64))
    reason: Mapped[str | None] = mapped_column(CleanText)
    #: The authenticated decider ("key:<id>" or "approver:<name>"); None for a
    #: generic link, whose typed name is only a claim (`claimed_name`).
    principal_id: Mapped[str | None] = mapped_column(CleanString(240))
    claimed_name: Mapped[str | None] = mapped_column(CleanString(200))
    #: True when the submitting principal approved under `self_approval: true`.
    self_approved: Mapped[bool | None] = mapped_column(Boolean)
    #: How the decider was identified (parkgate.approvals.identity): OIDC, key, Slack, link.
    identity: Mapped[dict[str, Any] | None] = mapped_column(JSONColumn)
    error_class: Mapped[str | None] = mapped_column(CleanString(32))
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONColumn)
    full_output: Mapped[dict[str, Any] | None] = mapped_column(JSONColumn)
    parent_tool_use_id: Mapped[str | None] = mapped_column(ID)
    workflow_id: Mapped[str | None] = mapped_column(CleanString(500))
    run_id: Mapped[str | None] = mapped_column(CleanString(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ToolEventRow(Base):
    """The `tool_events` table: append-only tool.* events (parkgate.calls.events.ToolEvent
    as written), hash-chained per call (see docs/HISTORY.md); read back as
    parkgate.store.results.EventRecord.

    `seq` is global and monotonic (SSE resume); `chain_id` is the root call's
    tool_use_id (a sub-call's events join its parent's chain) and `chain_index`
    the position in that chain.
    """

    __tablename__ = "tool_events"
    __table_args__ = (
        UniqueConstraint("event_id"),
        UniqueConstraint("session_id", "chain_id", "chain_index"),
        Index("ix_tool_events_session_seq", "session_id", "seq"),
        Index("ix_tool_events_call", "session_id", "tool_use_id"),
        Index("ix_tool_events_parent", "session_id", "parent_tool_use_id"),
        {"sqlite_autoincrement": True},
    )

    seq: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(CleanString(64))
    session_id: Mapped[str] = mapped_column(ID)
    chain_id: Mapped[str] = mapped_column(ID)
    chain_index: Mapped[int] = mapped_column(Integer)
    prev_hash: Mapped[str] = mapped_column(HASH)
    hash: Mapped[str] = mapped_column(HASH)
    type: Mapped[str] = mapped_column(CleanString(64))
    turn_id: Mapped[str] = mapped_column(ID)
    tool_use_id: Mapped[str] = mapped_column(ID)
    tool_name: Mapped[str] = mapped_column(CleanString(200))
    side_effects: Mapped[str | None] = mapped_column(CleanString(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    request_id: Mapped[str | None] = mapped_column(ID)
    error_class: Mapped[str | None] = mapped_column(CleanString(32))
    message: Mapped[str | None] = mapped_column(CleanText)
    parent_tool_use_id: Mapped[str | None] = mapped_column(ID)
    data: Mapped[dict[str, Any]] = mapped_column(JSONColumn)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)


class EventConflict(Base):
    """An event write that met a stored event of the same id with other content.

    Event ids are deterministic, so a retried write repeats its event; one that
    says something else means two runs disagreed about what happened. The
    stored event is kept (it is in the hash chain); the contradicting content
    is kept here, counted in /metrics and reported by `audit verify`.
    """

    __tablename__ = "event_conflicts"
    __table_args__ = (Index("ix_event_conflicts_call", "session_id", "tool_use_id"),)

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(CleanString(64))
    session_id: Mapped[str] = mapped_column(ID)
    tool_use_id: Mapped[str] = mapped_column(ID)
    type: Mapped[str] = mapped_column(CleanString(64))
    stored: Mapped[dict[str, Any]] = mapped_column(JSONColumn)
    attempted: Mapped[dict[str, Any]] = mapped_column(JSONColumn)
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime)


class EventChain(Base):
    """The head of one call's hash chain: detects deleted tail events.

    Also the row `apply()` locks, so concurrent writers extend a chain one at a
    time.
    """

    __tablename__ = "tool_event_chains"

    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    chain_id: Mapped[str] = mapped_column(ID, primary_key=True)
    length: Mapped[int] = mapped_column(Integer)
    head_hash: Mapped[str] = mapped_column(HASH)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Approval(Base):
    """One approval request; the decision columns are written once (first wins)."""

    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("token_hash"),
        Index("ix_approvals_call", "session_id", "tool_use_id"),
        Index("ix_approvals_pending", "decision", "expires_at"),
    )

    request_id: Mapped[str] = mapped_column(ID, primary_key=True)
    session_id: Mapped[str] = mapped_column(ID)
    turn_id: Mapped[str] = mapped_column(ID)
    tool_use_id: Mapped[str] = mapped_column(ID)
    tool_name: Mapped[str] = mapped_column(CleanString(200))
    token_hash: Mapped[str] = mapped_column(HASH)
    input_hash: Mapped[str] = mapped_column(HASH)
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    info: Mapped[dict[str, Any]] = mapped_column(JSONColumn)
    decision: Mapped[str | None] = mapped_column(CleanString(32))
    decided_by: Mapped[str | None] = mapped_column(CleanString(200))
    via: Mapped[str | None] = mapped_column(CleanString(64))
    reason: Mapped[str | None] = mapped_column(CleanText)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    principal_id: Mapped[str | None] = mapped_column(CleanString(240))
    claimed_name: Mapped[str | None] = mapped_column(CleanString(200))
    self_approved: Mapped[bool | None] = mapped_column(Boolean)
    identity: Mapped[dict[str, Any] | None] = mapped_column(JSONColumn)
    #: Named approvers who allowed (quorum requests), in order.
    votes: Mapped[list[str] | None] = mapped_column(JSONColumn)


class SessionRow(Base):
    """A registered agent session and the workspace that bounds it."""

    __tablename__ = "sessions"

    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    workspace_path: Mapped[str] = mapped_column(CleanText)
    kind: Mapped[str] = mapped_column(CleanString(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    #: The project of the key that registered it; other projects never see it.
    project: Mapped[str] = mapped_column(CleanString(100), server_default="default")
    registered_by: Mapped[str | None] = mapped_column(CleanString(32))
    #: The worker group whose hosts have the workspace (None: any worker).
    worker_group: Mapped[str | None] = mapped_column(CleanString(64))
    #: Tools the session's client runs (parkgate.client_tools.declared.ClientToolSpec dumps).
    client_tools: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONColumn)


class CallSubmission(Base):
    """Who submitted a call first (the API key), for separation of duties.

    Written by the API when it accepts a submission (an authentication fact,
    not a Temporal effect); the first submitter of a tool_use id stays.
    """

    __tablename__ = "call_submissions"

    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    tool_use_id: Mapped[str] = mapped_column(ID, primary_key=True)
    key_id: Mapped[str] = mapped_column(CleanString(32))
    key_name: Mapped[str] = mapped_column(CleanString(200))
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ApiKey(Base):
    """An agent API key; only its SHA-256 is stored."""

    __tablename__ = "api_keys"
    __table_args__ = (
        UniqueConstraint("key_hash"),
        Index(
            "uq_api_keys_active_name",
            "name",
            unique=True,
            postgresql_where=text("revoked_at IS NULL"),
            sqlite_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(CleanString(32), primary_key=True)
    name: Mapped[str] = mapped_column(CleanString(200))
    key_hash: Mapped[str] = mapped_column(HASH)
    prefix: Mapped[str] = mapped_column(CleanString(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    project: Mapped[str] = mapped_column(CleanString(100), server_default="default")
    #: Sorted role names: agent, approver, auditor, admin.
    roles: Mapped[list[str]] = mapped_column(JSONColumn)
    #: True for keys that existed before roles: they were given every role.
    migrated: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class Blob(Base):
    """A large Temporal payload stored once, by content (see parkgate.durable.blobs).

    `id` is the SHA-256 of the clear serialized payload; `data` is that payload
    sealed with the payload key, so the database never holds clear tool data.
    """

    __tablename__ = "blobs"

    id: Mapped[str] = mapped_column(HASH, primary_key=True)
    #: Bytes of the clear serialized payload.
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BlobRef(Base):
    """Which workflow carries a reference to a blob (prune keeps referenced blobs).

    `workflow_id` is empty when the payload was written without a workflow
    context; such references only protect the blob until the prune cutoff.
    """

    __tablename__ = "blob_refs"
    __table_args__ = (Index("ix_blob_refs_workflow", "workflow_id"),)

    blob_id: Mapped[str] = mapped_column(HASH, primary_key=True)
    workflow_id: Mapped[str] = mapped_column(CleanString(500), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class RememberedRuleRow(Base):
    """An approver's remembered decision (parkgate.rules.remembered): allows the same
    call again, in a session or a workspace, until it expires or is revoked."""

    __tablename__ = "remembered_rules"
    __table_args__ = (
        UniqueConstraint("request_id"),
        Index("ix_remembered_rules_lookup", "project", "tool_name", "expires_at"),
    )

    rule_id: Mapped[str] = mapped_column(CleanString(40), primary_key=True)
    project: Mapped[str] = mapped_column(CleanString(100))
    scope: Mapped[str] = mapped_column(CleanString(16))
    session_id: Mapped[str] = mapped_column(ID)
    workspace_path: Mapped[str] = mapped_column(CleanText)
    tool_name: Mapped[str] = mapped_column(CleanString(200))
    match: Mapped[str] = mapped_column(CleanString(16))
    input_hash: Mapped[str] = mapped_column(HASH)
    command_prefix: Mapped[str | None] = mapped_column(CleanText)
    created_by: Mapped[str | None] = mapped_column(CleanString(200))
    principal_id: Mapped[str | None] = mapped_column(CleanString(240))
    approver: Mapped[str | None] = mapped_column(CleanString(200))
    request_id: Mapped[str] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_by: Mapped[str | None] = mapped_column(CleanString(200))


class WorkspaceHoldingRow(Base):
    """A project's hold on a workspace path (parkgate.workspaces.ground): `owner` for the
    project that registered it first, `grant` for projects an admin granted it to."""

    __tablename__ = "workspace_holdings"
    __table_args__ = (Index("ix_workspace_holdings_project", "project"),)

    #: SHA-256 of `path` (paths are too long for an index on PostgreSQL).
    path_hash: Mapped[str] = mapped_column(HASH, primary_key=True)
    project: Mapped[str] = mapped_column(CleanString(100), primary_key=True)
    #: The resolved absolute path, as sessions store it.
    path: Mapped[str] = mapped_column(CleanText)
    kind: Mapped[str] = mapped_column(CleanString(16))
    #: The API key id that registered it, or who granted it (`admin:<key name>`, `cli`).
    created_by: Mapped[str | None] = mapped_column(CleanString(240))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SessionPromptRow(Base):
    """The prompt a turn of a Claude Code session answers (UserPromptSubmit),
    bounded, and the permission mode it ran in: the audit's context of a call
    filed under that turn. The first record of a (session, prompt, project) stays."""

    __tablename__ = "session_prompts"

    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    prompt_id: Mapped[str] = mapped_column(ID, primary_key=True)
    #: The project of the key that recorded it: the audit shows the row of the
    #: session's own project, so another project's key cannot speak for a turn.
    project: Mapped[str] = mapped_column(CleanString(100), primary_key=True)
    #: The prompt's first `claude_code_prompt_max_chars` characters (None: not seen).
    prompt: Mapped[str | None] = mapped_column(CleanText)
    #: Characters of the whole prompt (more than `prompt` holds: truncated).
    prompt_chars: Mapped[int | None] = mapped_column(Integer)
    permission_mode: Mapped[str | None] = mapped_column(CleanString(32))
    recorded_by: Mapped[str | None] = mapped_column(CleanString(32))
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BudgetWindowRow(Base):
    """What one budget's window holds for one scope (parkgate.rules.budgets): the
    units its calls reserved or spent. Reservations are conditional UPDATEs of
    this row, so concurrent calls never pass the limit (store/budget_store.py)."""

    __tablename__ = "budget_windows"

    budget: Mapped[str] = mapped_column(CleanString(64), primary_key=True)
    #: The session id, project or key name the budget is counted per.
    scope: Mapped[str] = mapped_column(CleanString(200), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    #: Micro-units (parkgate.rules.budgets.UNIT) reserved or spent.
    used: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class BudgetChargeRow(Base):
    """One call's charge to one budget: reserved when it is classified, `charged`
    once it ran, `released` when it did not; `over` while it waits parked past
    the limit (counted only if it runs). Keyed by the call: a retried
    classification finds its charge instead of making a second."""

    __tablename__ = "budget_charges"
    __table_args__ = (Index("ix_budget_charges_window", "budget", "scope", "window_start"),)

    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    tool_use_id: Mapped[str] = mapped_column(ID, primary_key=True)
    budget: Mapped[str] = mapped_column(CleanString(64), primary_key=True)
    scope: Mapped[str] = mapped_column(CleanString(200))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime)
    amount: Mapped[int] = mapped_column(BigInteger)
    #: The limit when it was reserved (micro-units).
    cap: Mapped[int] = mapped_column(BigInteger)
    #: The window's units before this call (what the approval page shows).
    used_before: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(CleanString(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    settled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
