"""/v1 audit query: list calls across sessions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from parkgate.api.shared.deps import (
    AuditorDep,
    RepoDep,
)
from parkgate.api.shared.errors import ApiError, error_responses
from parkgate.api.shared.schemas import (
    CallPageOut,
    CallSummary,
)
from parkgate.calls.records import CallStatus
from parkgate.store.errors import InvalidCursorError
from parkgate.store.results import CallFilters

router = APIRouter(prefix="/v1", tags=["agent"])


@router.get(
    "/tool-calls",
    response_model=CallPageOut,
    responses=error_responses(401, 403, 429, 422),
    tags=["audit"],
    summary="Audit query: calls newest first, keyset-paginated",
)
async def list_calls(
    repo: RepoDep,
    key: AuditorDep,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    turn_id: Annotated[str | None, Query(max_length=200)] = None,
    tool_name: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[list[CallStatus] | None, Query()] = None,
    side_effects: Annotated[
        Literal["none", "read", "write", "execute", "network"] | None, Query()
    ] = None,
    decided_by: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="created_at >= since")] = None,
    until: Annotated[datetime | None, Query(description="created_at < until")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    after: Annotated[
        str | None, Query(max_length=500, description="next_cursor of the previous page")
    ] = None,
) -> CallPageOut:
    filters = CallFilters(
        session_id=session_id,
        turn_id=turn_id,
        tool_name=tool_name,
        status=status or None,
        side_effects=side_effects,
        decided_by=decided_by,
        since=_aware(since),
        until=_aware(until),
        project=key.project,
    )
    try:
        page = await repo.list_calls(filters, limit=limit, cursor=after or None)
    except InvalidCursorError as exc:
        raise ApiError(422, "invalid_cursor", str(exc)) from exc
    items = [CallSummary.from_row(row) for row in page.items]
    return CallPageOut(items=items, next_cursor=page.next_cursor)


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value
