"""Agents' hook events (parkgate.dialects) onto the client-executed call path.

`POST /v1/hooks/{agent}` reads the event with the agent's dialect, hands it to
the path Claude Code's hook takes (parkgate.api.agents.claude_code_hook) with the
agent's gate, and answers in the agent's own hook output JSON. An event the
dialect cannot read is a 422 with what is wrong; an agent nobody registered,
a 404.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from parkgate import dialects
from parkgate.api.agents import claude_code_hook
from parkgate.api.agents.hook_gates import DialectGate
from parkgate.api.shared.errors import ApiError
from parkgate.dialects.base import AgentCall, Dialect, EventError

#: The Claude Code event each kind of agent event stands for on the shared path.
EVENT_NAMES = {"pre": "PreToolUse", "post": "PostToolUse", "failure": "PostToolUseFailure",
               "prompt": "UserPromptSubmit", "other": "Other"}


def dialect_of(agent: str) -> Dialect:
    """The registered dialect called `agent`, else a 404 naming the known ones."""
    found = dialects.get(agent)
    if found is None:
        known = ", ".join(["claude-code", *dialects.names()])
        raise ApiError(404, "unknown_agent",
                       f"no hook dialect for agent {agent!r} (known: {known})",
                       {"agent": agent})
    return found


def hook_input(dialect: Dialect, body: Any) -> claude_code_hook.HookInput:
    """The event as the shared path's input; 422 when the dialect cannot read it."""
    try:
        call = dialect.parse(body)
    except EventError as exc:
        raise ApiError(422, "invalid_hook_event", f"{dialect.label} hook event: {exc}",
                       {"agent": dialect.name}) from None
    try:
        return as_hook_input(call)
    except ValidationError as exc:  # what the shared path's input refuses (NaN, nesting...)
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors(include_url=False, include_input=False))
        raise ApiError(422, "invalid_hook_event", f"{dialect.label} hook event: {problems}",
                       {"agent": dialect.name}) from None


def as_hook_input(call: AgentCall) -> claude_code_hook.HookInput:
    return claude_code_hook.HookInput(
        hook_event_name=EVENT_NAMES[call.kind], session_id=call.session_id, cwd=call.cwd,
        tool_name=call.tool_name, tool_input=call.tool_input, tool_use_id=call.call_id,
        tool_response=call.response, error=call.error, prompt=call.prompt,
        prompt_id=call.turn_id, permission_mode=call.permission_mode)


async def answer(ctx: claude_code_hook.HookContext, dialect: Dialect,
                 body: Any) -> dict[str, Any]:
    """The agent's hook output for one event."""
    hook = hook_input(dialect, body)
    if hook.tool_name is not None and hook.tool_name in ctx.registry:
        hook = hook.model_copy(update={"tool_name": dialect.recorded_name(hook.tool_name,
                                                                          hosted=True)})
    ctx.gate = DialectGate(dialect)
    if hook.hook_event_name == "Other":
        return dialect.acknowledge()
    return await claude_code_hook.answer(ctx, hook)
