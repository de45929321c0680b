"""/v1/hooks: Claude Code's hook events in, Claude Code's hook output out (issue 25).

An HTTP hook in Claude Code's settings posts each event here with the agent
key as a bearer header (`PARKGATE_API_KEY` through `allowedEnvVars`); the
command hook adds `?confirm=true` and starts an allowed call's claim itself.
See parkgate.api.claude_code_hook.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from parkgate.api import claude_code_hook
from parkgate.api.deps import AgentDep, DepsDep, RepoDep, SettingsDep
from parkgate.api.errors import error_responses
from parkgate.api.v1.common import call_service
from parkgate.clients import claude_code

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
    ctx = claude_code_hook.HookContext(
        settings, repo, call_service(request), key, deps.registry,
        inbox_url=settings.public_base_url.rstrip("/") + "/inbox",
        confirm=request.query_params.get(claude_code.CONFIRM_PARAM) == "true",
        gone=request.is_disconnected,
    )
    return await claude_code_hook.answer(ctx, body)
