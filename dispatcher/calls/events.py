"""tool.* events: the catalog and the one event model every emitter uses.

The in-process dispatcher hands these to `on_event` callbacks; the durable
path records them in the history store, where `event_id` makes the write
idempotent (a retried activity writes nothing twice).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from parkgate.models import SideEffects, ToolErrorClass, utcnow

EventType = Literal[
    "tool.called",
    "tool.completed",
    "tool.failed",
    "tool.input_invalid",
    "tool.confirmation_requested",
    "tool.confirmation_resolved",
    "tool.released",
    "tool.claimed",
    "tool.claim_started",
    "tool.claim_lapsed",
    "tool.attached",
    "tool.outcome_reported",
    "tool.outcome_refused",
    "tool.lease_expired",
    "tool.outcome_late",
    "tool.unclaimed",
]

#: The same names as a tuple, read off `EventType` so the two cannot drift apart.
EVENT_TYPES: tuple[str, ...] = get_args(EventType)


def make_event_id(session_id: str, tool_use_id: str, event_type: str, seq: int = 0) -> str:
    """Deterministic event id: the same logical event always gets the same id.

    `seq` distinguishes repeated events of one type within a call (sub-calls of a
    composed tool).
    """
    raw = f"{session_id}\x1f{tool_use_id}\x1f{event_type}\x1f{seq}"
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


class ToolEvent(BaseModel):
    """One tool.* event."""

    type: EventType
    event_id: str = ""
    session_id: str
    turn_id: str
    tool_use_id: str
    tool_name: str
    side_effects: SideEffects | None = None
    at: datetime = Field(default_factory=utcnow)
    #: Set on confirmation events.
    request_id: str | None = None
    #: Set on tool.failed.
    error_class: ToolErrorClass | None = None
    message: str | None = None
    #: Set on events of a composed tool's sub-calls.
    parent_tool_use_id: str | None = None
    #: Event-specific details (input summary, decision, duration_ms, rule, ...).
    data: dict[str, Any] = Field(default_factory=dict)

    def model_post_init(self, __context: Any) -> None:
        if not self.event_id:
            self.event_id = make_event_id(self.session_id, self.tool_use_id, self.type)
