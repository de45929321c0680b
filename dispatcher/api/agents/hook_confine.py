"""Where an agent hook's call reaches, judged for the hook
(parkgate.api.agents.claude_code_hook): parkgate's own files, other projects'
workspaces and (when set) anything outside the session's workspace are
denied; elsewhere outside the workspace a person decides. The call is read as
the Claude Code calls it amounts to (the agent's gate's `views`), so every
agent's path tools and shell commands are judged alike."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from parkgate.api.agents import confine_checks
from parkgate.calls.cancellation import MAX_REASON_CHARS, VIA_HOOK, Cancellation
from parkgate.calls.records import CallStatus
from parkgate.client_tools.confinement import Reach
from parkgate.models import ToolUseBlock, input_sha256

if TYPE_CHECKING:
    from parkgate.api.agents.hook_context import HookContext, HookInput
    from parkgate.api.shared.schemas import CallResource
    from parkgate.store.results import SessionRecord

log = logging.getLogger(__name__)

#: How long a refused edit's cancel waits for the call's record before the deny.
_ENDED_RECORD_SECONDS = 5.0
#: What every denial for a protected path adds.
NEVER = "an agent's tools may not reach it, whatever a rule or a remembered decision says"


async def judged(ctx: HookContext, hook: HookInput,
                 record: SessionRecord) -> tuple[str | None, str | None]:
    """Why the call is denied (a protected path, or with
    `claude_code_outside_workspace: deny` anything outside the workspace), or
    why a person must decide it (outside the workspace); (None, None) else."""
    assert hook.tool_name is not None
    found = await reach(ctx, hook.tool_name, hook.tool_input or {}, hook.cwd,
                        record.workspace_path)
    if found.denied:
        return f"{found.denied}; {NEVER}", None
    if found.outside is None:
        return None, None
    where = f"{found.outside} is outside this session's workspace {record.workspace_path}"
    if ctx.settings.claude_code_outside_workspace == "deny":
        return f"{where} (claude_code_outside_workspace: deny)", None
    return None, f"{where}: a person decides"


async def edit_denied(ctx: HookContext, hook: HookInput, record: SessionRecord,
                      call: ToolUseBlock, resource: CallResource) -> str | None:
    """Why the call is not run when an approver's edit (a self-approval rule's,
    say) points the released input at parkgate's own files; None else. Only a
    call released unclaimed can carry an edit (a person decided). Such a call
    is ended here, never run, cancelled with the reason (`end_refused`): left
    released it would wait for the unclaimed timeout and end saying nothing."""
    if resource.status != CallStatus.RELEASED:
        return None
    try:
        view = await ctx.service.query(record.session_id, call.id)
    except Exception:  # Temporal not answering: the claim will say so
        return None
    released = view.release.input if view is not None and view.release is not None else None
    if released is None or input_sha256(released) == input_sha256(hook.tool_input or {}):
        return None
    assert hook.tool_name is not None
    found = await reach(ctx, hook.tool_name, released, hook.cwd, record.workspace_path)
    if found.denied is None:
        return None
    await end_refused(ctx, record.session_id, call.id,
                      f"the approved edit is refused: {found.denied}")
    return f"in the approved edit, {found.denied}; an agent's tools may not reach it, " \
        "and the call is not run"


async def end_refused(ctx: HookContext, session_id: str, tool_use_id: str, why: str) -> None:
    """Cancel a released call the hook refuses, naming the hook's key and
    `why`, and wait (briefly) for its record, so the audit has it when the
    agent hears the deny. The deny stands if Temporal does not answer."""
    try:
        await ctx.service.cancel(session_id, tool_use_id, Cancellation(
            by=ctx.key.label, via=VIA_HOOK, reason=why[:MAX_REASON_CHARS]))
        await ctx.service.wait(session_id, tool_use_id, _ENDED_RECORD_SECONDS)
    except Exception:  # the deny does not wait for the record
        log.exception("call %s/%s refused by the hook, not cancelled", session_id, tool_use_id)


async def reach(ctx: HookContext, tool_name: str, tool_input: dict[str, Any], cwd: str,
                workspace: str) -> Reach:
    """What the call reaches, read as the Claude Code calls it amounts to (the
    gate's views): the first protected path, else the first outside the workspace."""
    outside: str | None = None
    for name, view in ctx.gate.views(tool_name, tool_input) or [("", {})]:
        found = await confine_checks.reach(ctx.settings, ctx.repo, ctx.key.project, name,
                                           view, cwd, workspace)
        if found.denied:
            return found
        outside = outside or found.outside
    return Reach(outside=outside)
