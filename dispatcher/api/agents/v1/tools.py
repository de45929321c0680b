"""/v1 tool definitions visible to a session."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from parkgate.api.agents import tool_classes
from parkgate.api.agents.v1.common import (
    SessionId,
    session_of,
)
from parkgate.api.shared.deps import (
    DepsDep,
    ReaderDep,
    RepoDep,
    SettingsDep,
)
from parkgate.api.shared.errors import error_responses
from parkgate.api.shared.schemas import (
    ToolsOut,
)
from parkgate.client_tools import declared

router = APIRouter(prefix="/v1", tags=["agent"])


@router.get(
    "/sessions/{session_id}/tools",
    response_model=ToolsOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="Tool definitions visible to a session",
)
async def list_tools(
    session_id: SessionId,
    deps: DepsDep,
    repo: RepoDep,
    key: ReaderDep,
    settings: SettingsDep,
    format: Annotated[Literal["canonical", "openai", "anthropic"], Query()] = "canonical",
) -> ToolsOut:
    record = await session_of(repo, session_id, key)
    session = record.for_turn("-")
    # Hosted tools, then the session's own (client-executed: `client_executed`).
    definitions = [*deps.registry.definitions_for(session),
                   *declared.definitions(record.client_tools,
                                         tool_classes.floor(settings, deps.registry))]
    if format == "openai":
        tools = [d.to_openai() for d in definitions]
    elif format == "anthropic":
        tools = [d.to_anthropic() for d in definitions]
    else:
        tools = [d.model_dump(mode="json") for d in definitions]
    return ToolsOut(session_id=session_id, format=format, tools=tools)
