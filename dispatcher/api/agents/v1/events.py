"""/v1 events: one call's timeline and a session's live event stream (SSE)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from parkgate.api.agents.v1.common import (
    MAX_SEQ,
    SessionId,
    ToolUseId,
    session_of,
)
from parkgate.api.shared.approval_links import (
    visible_approval_link,
)
from parkgate.api.shared.deps import (
    DepsDep,
    ReaderDep,
    RepoDep,
    SecretDep,
    SettingsDep,
)
from parkgate.api.shared.errors import ApiError, error_responses, not_found
from parkgate.api.shared.schemas import (
    CallEventsOut,
    TimelineEventOut,
)
from parkgate.store.repository import Repository
from parkgate.store.results import EventRecord

router = APIRouter(prefix="/v1", tags=["agent"])


@router.get(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/events",
    response_model=CallEventsOut,
    responses=error_responses(401, 403, 429, 404, 422),
    tags=["audit"],
    summary="One call's timeline",
)
async def call_events(
    session_id: SessionId,
    tool_use_id: ToolUseId,
    repo: RepoDep,
    settings: SettingsDep,
    secret: SecretDep,
    key: ReaderDep,
) -> CallEventsOut:
    await session_of(repo, session_id, key)
    entries = await repo.timeline(session_id, tool_use_id)
    if not entries and await repo.get_call(session_id, tool_use_id) is None:
        raise not_found(f"tool call {tool_use_id!r}")
    events = [
        TimelineEventOut(
            **_event_fields(e.event.model_dump()),
            approval_url=await visible_approval_link(repo, settings, secret, key, e.event),
            since_previous_ms=e.since_previous_ms,
            since_start_ms=e.since_start_ms,
        )
        for e in entries
    ]
    return CallEventsOut(session_id=session_id, tool_use_id=tool_use_id, events=events)


_EVENT_KEYS = set(TimelineEventOut.model_fields) - {"since_previous_ms", "since_start_ms"}


def _event_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k in _EVENT_KEYS}


# --------------------------------------------------------------------- SSE
#: One server-sent event: `id` is the event seq, `event` its type, `data` the
#: EventOut JSON.
_SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The event seq (use as Last-Event-ID)."},
        "event": {"type": "string", "description": "tool.called, tool.completed, ..."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "The event as JSON (EventOut).",
        },
        "retry": {"type": "integer"},
    },
}

@router.get(
    "/sessions/{session_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": "text/event-stream of tool.* events; each `id` is the event seq.",
            "content": {"text/event-stream": {"schema": _SSE_EVENT_SCHEMA}},
        },
        **error_responses(401, 403, 429, 404, 422),
    },
    summary="Live tool.* events of a session (Server-Sent Events, resumable)",
)
async def session_events(
    session_id: SessionId,
    request: Request,
    deps: DepsDep,
    repo: RepoDep,
    settings: SettingsDep,
    secret: SecretDep,
    key: ReaderDep,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", max_length=40, include_in_schema=True)
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=MAX_SEQ, description="Start after this seq (like Last-Event-ID)"),
    ] = None,
    follow: Annotated[bool, Query(description="Keep the stream open for new events")] = True,
) -> EventSourceResponse:
    await session_of(repo, session_id, key)
    start = after or 0
    if last_event_id:
        try:
            start = int(last_event_id)
        except ValueError as exc:
            raise ApiError(
                422, "invalid_last_event_id", "Last-Event-ID must be an event seq"
            ) from exc
        if not 0 <= start <= MAX_SEQ:
            raise ApiError(422, "invalid_last_event_id", f"Last-Event-ID must be 0..{MAX_SEQ}")
    links = functools.partial(visible_approval_link, repo, settings, secret, key)
    return EventSourceResponse(
        _stream(repo, session_id, start, follow, deps.sse_poll_seconds, request, links),
        ping=15,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _stream(
    repo: Repository,
    session_id: str,
    after_seq: int,
    follow: bool,
    poll: float,
    request: Request,
    links: Callable[[EventRecord], Awaitable[str | None]],
) -> AsyncIterator[ServerSentEvent]:
    last = after_seq
    while True:
        batch = await repo.events_after(session_id, last, limit=500)
        for ev in batch:
            last = ev.seq
            payload = _event_fields(ev.model_dump(mode="json"))
            payload["approval_url"] = await links(ev)
            yield ServerSentEvent(data=json.dumps(payload), event=ev.type, id=str(ev.seq))
        if batch:
            continue
        if not follow or await request.is_disconnected():
            return
        await asyncio.sleep(poll)
