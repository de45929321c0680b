"""Builders for store tests: events and call updates with unique ids."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from parkgate.calls.events import ToolEvent, make_event_id
from parkgate.models import SideEffects, utcnow
from parkgate.store import CallStatus, CallUpdate


def uid(prefix: str = "x") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def event(
    session_id: str,
    tool_use_id: str,
    type_: str = "tool.called",
    *,
    seq: int = 0,
    at: datetime | None = None,
    parent: str | None = None,
    **data: Any,
) -> ToolEvent:
    return ToolEvent.model_validate(
        {
            "type": type_,
            "event_id": make_event_id(session_id, tool_use_id, type_, seq),
            "session_id": session_id,
            "turn_id": "turn-1",
            "tool_use_id": tool_use_id,
            "tool_name": "read_file",
            "side_effects": SideEffects.READ,
            "at": at or utcnow(),
            "parent_tool_use_id": parent,
            "data": data,
        }
    )


def call_events(
    session_id: str, tool_use_id: str, *, start: datetime | None = None
) -> list[ToolEvent]:
    """A called -> completed pair 5 ms apart."""
    t0 = start or utcnow()
    return [
        event(session_id, tool_use_id, "tool.called", at=t0, input={"path": "a.txt"}),
        event(
            session_id,
            tool_use_id,
            "tool.completed",
            at=t0 + timedelta(milliseconds=5),
            duration_ms=5.0,
        ),
    ]


def finished(session_id: str, tool_use_id: str, **kw: Any) -> CallUpdate:
    values: dict[str, Any] = {
        "session_id": session_id,
        "tool_use_id": tool_use_id,
        "turn_id": "turn-1",
        "tool_name": "read_file",
        "side_effects": SideEffects.READ,
        "status": CallStatus.SUCCEEDED,
        "finished_at": utcnow(),
    }
    values.update(kw)
    return CallUpdate.model_validate(values)
