"""/v1/hooks: an agent's hook events in, its hook output out (issues 25, 38).

`/v1/hooks/claude-code` is Claude Code's; `/v1/hooks/{agent}` every other
agent with a registered dialect (parkgate.dialects: codex, gemini, ...), read
by parkgate.api.agents.agent_hooks onto the same path.

An HTTP hook in Claude Code's settings posts each event here with the agent
key as a bearer header (`PARKGATE_API_KEY` through `allowedEnvVars`); the
command hook adds `?confirm=true` and starts an allowed call's claim itself.
See parkgate.api.agents.claude_code_hook.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from parkgate.api.agents import agent_hooks, claude_code_hook
from parkgate.api.agents.v1.common import call_service, reject_unencodable
from parkgate.api.shared.deps import AgentDep, DepsDep, RepoDep, SettingsDep
from parkgate.api.shared.errors import ApiError, error_responses
from parkgate.dialects import claude_code

router = APIRouter(prefix="/v1", tags=["agent"])


@router.post(
    "/hooks/claude-code",
    responses=error_responses(401, 403, 429, 413, 422),
    summary="Claude Code hook events (UserPromptSubmit, PreToolUse, PostToolUse, "
            "PostToolUseFailure)",
)
async def claude_code_hook_event(
    body: claude_code_hook.HookInput, request: Request, repo: RepoDep, key: AgentDep,
    settings: SettingsDep, deps: DepsDep,
) -> dict[str, Any]:
    # Lone surrogates are JSON but no text: nothing could hash, store or judge them.
    reject_unencodable(body.model_dump(), ["body"])
    ctx = claude_code_hook.HookContext(
        settings, repo, call_service(request), key, deps.registry,
        inbox_url=settings.public_base_url.rstrip("/") + "/inbox",
        confirm=request.query_params.get(claude_code.CONFIRM_PARAM) == "true",
        gone=request.is_disconnected,
    )
    return await claude_code_hook.answer(ctx, body)


@router.post(
    "/hooks/{agent}",
    responses=error_responses(400, 401, 403, 404, 429, 413, 422),
    summary="Another agent's hook events in its own dialect (codex, gemini, ...)",
)
async def agent_hook_event(
    agent: str, request: Request, repo: RepoDep, key: AgentDep, settings: SettingsDep,
    deps: DepsDep,
) -> dict[str, Any]:
    dialect = agent_hooks.dialect_of(agent)
    try:
        body = await request.json()
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"the hook event is not JSON ({exc})") from None
    reject_unencodable(body, ["body"])
    ctx = claude_code_hook.HookContext(
        settings, repo, call_service(request), key, deps.registry,
        inbox_url=settings.public_base_url.rstrip("/") + "/inbox",
        confirm=request.query_params.get(claude_code.CONFIRM_PARAM) == "true",
        gone=request.is_disconnected,
    )
    return await agent_hooks.answer(ctx, dialect, body)
