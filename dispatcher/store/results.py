"""What the store's reads return: pydantic models the HTTP layer and CLI share."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallColumns, CallStatus
from parkgate.models import Session
from parkgate.store.semantics import MeaningProblem


class CallRecord(CallColumns):
    """One stored `tool_calls` row (its columns: `parkgate.calls.records.CallColumns`)."""

    id: int
    session_id: str
    tool_use_id: str
    status: CallStatus
    created_at: datetime
    updated_at: datetime


class EventRecord(ToolEvent):
    """One recorded event: the emitted ToolEvent plus its place in history
    (global `seq` for SSE resume, its call chain and hash, when it was written)."""

    seq: int
    chain_id: str
    chain_index: int
    prev_hash: str
    hash: str
    recorded_at: datetime

    def to_event(self) -> ToolEvent:
        """The event as emitters produced it (for SSE and the in-process API)."""
        return ToolEvent.model_validate(self.model_dump(include=set(ToolEvent.model_fields)))


class TimelineEntry(BaseModel):
    """An event of a call's timeline with the time elapsed around it."""

    event: EventRecord
    #: Milliseconds since the previous event of the timeline (None for the first).
    since_previous_ms: float | None = None
    #: Milliseconds since the first event of the timeline.
    since_start_ms: float = 0.0


class CallFilters(BaseModel):
    """Audit query filters; every field is optional and they combine with AND."""

    session_id: str | None = None
    turn_id: str | None = None
    tool_name: str | None = None
    status: CallStatus | list[CallStatus] | None = None
    side_effects: str | None = None
    decided_by: str | None = None
    since: datetime | None = None  # created_at >= since
    until: datetime | None = None  # created_at < until
    #: Only calls of sessions in this project (every API and page read sets it).
    project: str | None = None


class Page(BaseModel):
    """One page of calls, newest first; pass `next_cursor` back for the next."""

    items: list[CallRecord]
    next_cursor: str | None = None


class SessionRecord(BaseModel):
    session_id: str
    workspace_path: str
    kind: str
    created_at: datetime
    project: str = "default"
    registered_by: str | None = None
    worker_group: str | None = None
    #: Tools the session's client runs (parkgate.client_tools.declared).
    client_tools: list[dict[str, Any]] | None = None

    def for_turn(self, turn_id: str) -> Session:
        """The session a call of this turn runs in (what the workflow carries)."""
        return Session(
            session_id=self.session_id,
            turn_id=turn_id,
            workspace_path=self.workspace_path,
            kind=self.kind,  # type: ignore[arg-type]
            worker_group=self.worker_group,
        )


class ApiKeyRecord(BaseModel):
    """An API key as listed (never the key itself)."""

    id: str
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None
    project: str = "default"
    roles: list[str] = Field(default_factory=list)
    #: Existed before roles: given every role by the migration.
    migrated: bool = False

    @property
    def active(self) -> bool:
        return self.revoked_at is None


ProblemKind = Literal["modified", "deleted", "reordered"]


class ChainProblem(BaseModel):
    """One place where the stored history does not match its hash chain."""

    kind: ProblemKind
    session_id: str
    chain_id: str
    #: The event that is modified / out of order / follows the gap (None when the
    #: missing events were at the end of the chain).
    event_id: str | None = None
    seq: int | None = None
    chain_index: int | None = None
    detail: str

    def describe(self) -> str:
        where = f"event {self.event_id} (seq {self.seq})" if self.event_id else "chain end"
        return (
            f"{self.kind}: session {self.session_id} call {self.chain_id}, {where}: {self.detail}"
        )


class VerifyReport(BaseModel):
    """The outcome of `verify_chain`."""

    chains: int = 0
    events: int = 0
    problems: list[ChainProblem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> ChainProblem | None:
        """The earliest problem (lowest seq), the one `audit verify` names."""
        if not self.problems:
            return None
        return min(self.problems, key=lambda p: (p.seq is None, p.seq or 0))


class MeaningReport(BaseModel):
    """The outcome of `verify_meaning`: calls checked and every violation."""

    calls: int = 0
    problems: list[MeaningProblem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems
