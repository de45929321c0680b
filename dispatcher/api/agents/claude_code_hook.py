"""Claude Code's hooks, answered on the client-executed call path (issue 25).

A Claude Code session is the parkgate session with its `session_id`, its
`cwd` the workspace (under `workspace_roots`, else a denial saying why), its
tools client tools (declared on first use, classed by parkgate.dialects.claude_code),
and `tool_use_id` the call's id, so a retried hook attaches to its call.

PreToolUse submits the call and holds up to `claude_code_wait_seconds`:
released -> the hook claims it (Claude Code running it is the claim), starts
the claim (the command hook's process does, just before it answers) and
answers `allow` (with `updatedInput` when an approver edited it); denied,
expired, cancelled -> `deny` with the reason; still parked -> the fallback
(`ask`, `deny` with the link and "call again", or `defer`). PostToolUse and
PostToolUseFailure report the outcome. UserPromptSubmit records the turn's
prompt (bounded) and permission mode for the audit and answers `{}`, so the
prompt proceeds. Every answer is Claude Code's hook output JSON; nothing here
answers a 500 for a call it could not gate.

Other agents (Codex, Gemini CLI, ...) take the same path: their dialect's
events arrive here as a HookInput (parkgate.api.agents.agent_hooks), and what differs
between agents (classes, hold, lease, paths, answers) is the context's
`gate` (parkgate.api.agents.hook_gates). An agent that sends no call id gets a fresh
one per pre-tool event: a retry of the same tool and input attaches to the
call still waiting, and the post-tool event reports the session's started
call with that tool and input.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from datetime import timedelta
from typing import Any

from parkgate.api.agents import client_calls, hook_confine
from parkgate.api.agents.attach import same_input_call
from parkgate.api.agents.hook_context import HookContext as HookContext
from parkgate.api.agents.hook_context import HookInput as HookInput
from parkgate.api.agents.workspace_checks import check_workspace, claim_ground
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.schemas import ID_RE, CallResource
from parkgate.approvals.edits import edit_note
from parkgate.calls.events import ToolEvent, make_event_id
from parkgate.calls.records import CallStatus
from parkgate.client_tools.declared import ClientToolSpec, definitions, stricter
from parkgate.dialects.claude_code_wire import START_FIELD
from parkgate.durable.client_payloads import ClaimInput, OutcomeInput, StartInput
from parkgate.durable.dispatcher import IdempotencyConflictError
from parkgate.models import (
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolUseBlock,
    input_hash_forms,
    input_sha256,
    utcnow,
)
from parkgate.store.errors import SessionConflictError
from parkgate.store.results import CallFilters, SessionRecord

log = logging.getLogger(__name__)

#: The turn a Claude Code call is filed under: the user prompt it answers
#: (`prompt_id`), so the audit groups a session's calls by prompt; this when
#: the event carries none.
TURN_ID = "claude-code"
#: The API's id syntax (sessions, turns, tool_use ids).
_ID_RE = re.compile(ID_RE)
#: Attempts at declaring a new tool while other hooks of the session declare theirs.
_DECLARE_ATTEMPTS = 5


async def answer(ctx: HookContext, hook: HookInput) -> dict[str, Any]:
    """The hook output for one event."""
    if hook.hook_event_name == "PreToolUse":
        return await pre_tool_use(ctx, hook)
    if hook.hook_event_name == "UserPromptSubmit":
        await user_prompt_submit(ctx, hook)
    if hook.hook_event_name in ("PostToolUse", "PostToolUseFailure"):
        await post_tool_use(ctx, hook)
    return ctx.gate.acknowledge()


async def user_prompt_submit(ctx: HookContext, hook: HookInput) -> None:
    """Record the prompt the turn's calls will answer (never blocks the prompt):
    nothing for a session of another project."""
    record = await ctx.repo.get_session(hook.session_id)
    if record is None or record.project == ctx.key.project:
        await _record_turn(ctx, hook, hook.prompt or "")


async def _record_turn(ctx: HookContext, hook: HookInput, prompt: str | None) -> None:
    """The turn's prompt and permission mode under the key's project (the
    session's, checked by the caller); nothing without a usable prompt_id."""
    turn = turn_of(ctx, hook)
    if turn == ctx.gate.turn_id or (prompt is None and hook.permission_mode is None):
        return
    await ctx.repo.record_prompt(
        hook.session_id, turn, project=ctx.key.project, prompt=prompt,
        max_chars=ctx.settings.claude_code_prompt_max_chars,
        permission_mode=hook.permission_mode, recorded_by=ctx.key.key_id)


def turn_of(ctx: HookContext, hook: HookInput) -> str:
    """The prompt the call answers, as the call's turn."""
    prompt = hook.prompt_id
    return prompt if prompt and _ID_RE.match(prompt) else ctx.gate.turn_id


def _deny(ctx: HookContext, reason: str) -> dict[str, Any]:
    return ctx.gate.deny(f"parkgate: {reason}")


def _side_effects(ctx: HookContext, tool_name: str) -> SideEffects:
    def known(name: str) -> Any:
        definition = ctx.registry.get(name)
        return definition.side_effects if definition is not None else None
    return ctx.gate.side_effects(ctx.settings, tool_name, known)


async def _session(ctx: HookContext, hook: HookInput, tool_name: str) -> SessionRecord | str:
    """The session with `tool_name` declared, or why the call cannot be gated."""
    # The API's one workspace check and its projects' ground (a path belongs to
    # the project that registered it first), as POST /v1/sessions applies them.
    project_roots = ctx.settings.workspace_roots_for(ctx.key.project)
    try:
        workspace = await asyncio.to_thread(check_workspace, hook.cwd, project_roots)
    except ApiError as exc:
        roots = ", ".join(str(r) for r in project_roots)
        return f"the working directory {hook.cwd!r} cannot be gated ({exc.message}; " \
               f"workspace_roots: {roots})"
    ours = _side_effects(ctx, tool_name)
    for _ in range(_DECLARE_ATTEMPTS):
        record = await ctx.repo.get_session(hook.session_id)
        if record is not None and record.project != ctx.key.project:
            return "this session id belongs to another project"
        declared = list(record.client_tools or []) if record is not None else []
        mine = next((t for t in declared if t.get("name") == tool_name), None)
        cls = ours if mine is None else stricter(SideEffects(mine["side_effects"]), ours)
        if mine is not None and cls == SideEffects(mine["side_effects"]):
            return record  # type: ignore[return-value]
        # Not declared yet, or declared looser than this deployment classes it
        # (an agent key's own POST /v1/sessions): the stricter class replaces it.
        declared = [t for t in declared if t.get("name") != tool_name]
        spec = ctx.gate.client_tool(tool_name, cls)
        # The session keeps the workspace of its first call: Claude Code's cwd
        # follows a `cd` in Bash, and each cwd is checked against the roots above.
        path = record.workspace_path if record is not None else str(workspace)
        if record is None:
            try:
                await claim_ground(ctx.repo, hook.session_id, path, ctx.key)
            except ApiError as exc:
                return f"the working directory {hook.cwd!r} cannot be gated ({exc.message})"
        try:
            record, _ = await ctx.repo.register_session(
                hook.session_id, path, "main", project=ctx.key.project,
                registered_by=ctx.key.key_id,
                client_tools=[*declared, spec.model_dump(mode="json")],
            )
        except SessionConflictError as exc:
            return f"session {hook.session_id!r} is registered with another workspace ({exc})"
    return f"could not declare the tool {tool_name!r} for this session"


#: How long a confinement denial waits for its record before it answers.
_CONFINED_RECORD_SECONDS = 5.0
_ALREADY_CLAIMED = "this call was already claimed and run once; it is not released again"


async def pre_tool_use(ctx: HookContext, hook: HookInput) -> dict[str, Any]:
    """Submit, hold up to the wait, answer allow / deny / the fallback."""
    if hook.tool_use_id is None and not ctx.gate.has_call_id:
        # No call id from the agent: a fresh one; the same call again attaches.
        hook = hook.model_copy(update={"tool_use_id": f"{ctx.gate.name}-{uuid.uuid4().hex}"})
    if not hook.tool_name or hook.tool_use_id is None:
        return _deny(ctx, "the hook event has no tool_name or tool_use_id")
    if hook.tool_name in ctx.registry:
        return _deny(ctx, f"{hook.tool_name!r} is the name of a parkgate-hosted tool")
    try:
        ClientToolSpec(name=hook.tool_name, side_effects="execute")  # type: ignore[arg-type]
    except ValueError:
        return _deny(ctx, f"the tool name {hook.tool_name!r} cannot be recorded")
    record = await _session(ctx, hook, hook.tool_name)
    if isinstance(record, str):
        return _deny(ctx, record)
    denied, human = await hook_confine.judged(ctx, hook, record)
    # The turn's permission mode when no UserPromptSubmit hook recorded it.
    await _record_turn(ctx, hook, None)
    call = ToolUseBlock(id=hook.tool_use_id, name=hook.tool_name, input=hook.tool_input or {})
    await ctx.repo.record_submission(hook.session_id, [call.id], ctx.key.key_id, ctx.key.name)
    if denied is not None:
        return await _refuse_confined(ctx, hook, record, call, denied)
    attached = await same_input_call(ctx.repo, ctx.settings, record, call,
                                     always=not ctx.gate.has_call_id) \
        or await _twin(ctx, hook.session_id, call, CallStatus.RELEASED) \
        or await _unstarted_twin(ctx, hook.session_id, call)
    if attached is not None:  # the model called again: pick up the parked call
        await _record_attach(ctx, hook, call, attached)
        call = call.model_copy(update={"id": attached})
    # Claude Code running the call is the claim: taken with the release when
    # policy releases the call at once (one store write, no claim update).
    inp = _claim_input(ctx, hook, call)
    try:
        started = await client_calls.start_claiming(
            ctx.service, call, record.for_turn(turn_of(ctx, hook)),
            _definitions(ctx, record, hook.tool_name, human), inp)
    except IdempotencyConflictError as exc:
        return _deny(ctx, f"tool_use_id {call.id!r} was used for another call ({exc})")
    resource = await ctx.service.wait(hook.session_id, call.id,
                                      ctx.gate.wait_seconds(ctx.settings), claiming=True)
    if resource is None:
        return _fallback(ctx, None)
    if resource.status in (CallStatus.RELEASED, CallStatus.CLAIMED):
        edit = await hook_confine.edit_denied(ctx, hook, record, call, resource)
        if edit is not None:
            return _deny(ctx, edit)
        return await _claimed(ctx, hook, call, resource, inp, started=started)
    if resource.finished:
        text = resource.result.text if resource.result is not None else resource.status.value
        return _deny(ctx, f"{resource.status.value}: {text}")
    return _fallback(ctx, resource)


async def _refuse_confined(ctx: HookContext, hook: HookInput, record: SessionRecord,
                           call: ToolUseBlock, reason: str) -> dict[str, Any]:
    """Deny a call that reaches where no agent tool may, and record it as a
    denied call (rule `confine: ...`, the tool declared with `confined`), so
    `parkgate audit` shows it like any other denial. The deny stands when the
    record cannot be made (Temporal not answering, the id used for another call)."""
    tools = [d.model_copy(update={"confined": reason}) if d.name == call.name else d
             for d in _definitions(ctx, record, call.name, None)]
    try:
        await ctx.service.start_call(call, record.for_turn(turn_of(ctx, hook)), tools)
        await ctx.service.wait(hook.session_id, call.id, _CONFINED_RECORD_SECONDS)
    except IdempotencyConflictError as exc:
        log.warning("%s call %s denied, not recorded: %s", ctx.gate.name, call.id, exc)
    except Exception:  # the deny does not wait for the record
        log.exception("%s call %s denied, not recorded", ctx.gate.name, call.id)
    return _deny(ctx, reason)


def _definitions(ctx: HookContext, record: SessionRecord, tool_name: str,
                 human: str | None) -> list[ToolDefinition]:
    """The session's tools for this call: none looser than this deployment
    classes it, and the called one marked for a person to decide when it
    reaches outside the workspace."""
    found = definitions(record.client_tools, lambda n: _side_effects(ctx, n))
    if human is None:
        return found
    return [d.model_copy(update={"human_decides": human}) if d.name == tool_name else d
            for d in found]


def _claim_input(ctx: HookContext, hook: HookInput, call: ToolUseBlock) -> ClaimInput:
    """The claim Claude Code's run of the call makes (its lease fits the run)."""
    return client_calls.claim_input(
        ctx.settings, ctx.key.key_id, ctx.key.name, ctx.gate.lease_seconds(
            call.name, hook.tool_input or {}, ctx.settings.client_lease_seconds,
            ctx.settings.client_lease_max_seconds))


async def _record_attach(ctx: HookContext, hook: HookInput, call: ToolUseBlock,
                         attached: str) -> None:
    """Remember that `call`'s id answers with the call `attached`: its
    PostToolUse reports that call's outcome (and no other's)."""
    event = ToolEvent(
        type="tool.attached", session_id=hook.session_id, turn_id=turn_of(ctx, hook),
        tool_use_id=attached, tool_name=call.name,
        event_id=make_event_id(hook.session_id, call.id, "tool.attached"),
        data={"tool_use_id": call.id})
    await ctx.repo.apply([event], None)


async def _claimed(ctx: HookContext, hook: HookInput, call: ToolUseBlock,
                   resource: CallResource, inp: ClaimInput, *, started: bool) -> dict[str, Any]:
    """Allow the call this hook holds the claim of (taken at the release, or
    claimed now): Claude Code runs it next; deny one claimed by another."""
    was = resource.status
    try:
        claimed = await client_calls.claimed_for_submitter(ctx.service, resource, call, inp,
                                                           started=started, gone=ctx.gone)
    except ApiError as exc:
        return _deny(ctx, f"the call could not be claimed ({exc.code}: {exc.message})")
    if not claimed.claim_won or claimed.input is None:
        if was == CallStatus.CLAIMED:
            return _deny(ctx, _ALREADY_CLAIMED)
        return _deny(ctx, f"the call could not be claimed (it is {claimed.status.value})")
    released = claimed.input
    edited = input_sha256(released) != input_sha256(hook.tool_input or {})
    reason = "approved with edits" if edited else "allowed"
    # The model runs other input than it sent: it is told what changed, as a
    # hosted call's result is (an allow's reason reaches only the user).
    note = edit_note(hook.tool_input or {}, released) if edited else None
    answer = ctx.gate.allow(f"parkgate: {reason}", released if edited else None, note)
    if claimed.claim_id is None:
        return answer
    if ctx.confirm:  # the hook process starts it, just before Claude Code runs it
        answer[START_FIELD] = {"session_id": hook.session_id,
                                           "tool_use_id": call.id,
                                           "claim_id": claimed.claim_id}
        return answer
    if ctx.gone is not None and await ctx.gone():
        return _deny(ctx, "the hook request ended before the call could be allowed")
    try:
        await client_calls.start(ctx.service, hook.session_id, call.id, StartInput(
            claim_id=claimed.claim_id, started_by=inp.claimed_by))
    except ApiError as exc:
        return _deny(ctx, f"the call could not be started ({exc.code}: {exc.message})")
    return answer


def _fallback(ctx: HookContext, resource: CallResource | None) -> dict[str, Any]:
    """Nobody decided within the wait: the configured answer."""
    # The inbox, never the signed approval link: the agent must not hold the
    # link to its own gate (the model reads this reason).
    link = ctx.inbox_url
    if resource is not None and resource.request_id:
        link = f"{link} (request {resource.request_id})"
    return ctx.gate.waiting(ctx.settings, link)


async def post_tool_use(ctx: HookContext, hook: HookInput) -> None:
    """Report what Claude Code's run returned (the call's outcome)."""
    if hook.tool_name is None or (hook.tool_use_id is None and ctx.gate.has_call_id):
        return
    record = await ctx.repo.get_session(hook.session_id)
    if record is None or record.project != ctx.key.project:
        return
    tool_use_id = await _claimed_id(ctx, hook)
    if tool_use_id is None:
        return
    failed = hook.hook_event_name == "PostToolUseFailure"
    text = hook.error or "the tool failed" if failed else \
        ctx.gate.response_text(hook.tool_response)
    sha = await _released_sha256(ctx, hook.session_id, tool_use_id, hook.tool_input or {})
    inp = OutcomeInput(content=[TextBlock(text=text)], is_error=failed, input_sha256=sha,
                       reported_by=f"key:{ctx.key.key_id}", reported_by_name=ctx.key.name)
    try:
        await client_calls.report(ctx.service, hook.session_id, tool_use_id, inp)
    except ApiError as exc:
        log.warning("claude-code outcome of %s not recorded: %s", tool_use_id, exc.message)


async def _released_sha256(ctx: HookContext, session_id: str, tool_use_id: str,
                           ran: dict[str, Any]) -> str:
    """The hash of the input as released (edited or not): what was claimed and
    run. The claim's event names it (no status query); else the workflow; else,
    Temporal not answering, the run's own input stands in."""
    event = await ctx.repo.get_event(make_event_id(session_id, tool_use_id, "tool.claimed"))
    sha = (event.data or {}).get("input_sha256") if event is not None else None
    if isinstance(sha, str):
        return sha
    try:
        view = await ctx.service.query(session_id, tool_use_id)
    except Exception:  # Temporal not answering: the run's own input stands in
        return input_sha256(ran)
    return view.release.input_sha256 if view is not None and view.release \
        else input_sha256(ran)


async def _claimed_id(ctx: HookContext, hook: HookInput) -> str | None:
    """The call this run was: its own id, or the call its PreToolUse attached
    to (recorded then); never another call that merely has the same input."""
    assert hook.tool_name is not None
    if hook.tool_use_id is None:  # the agent sends no id: the started call with this input
        return await _started_twin(ctx, hook.session_id, ToolUseBlock(
            id="-", name=hook.tool_name, input=hook.tool_input or {}))
    row = await ctx.repo.get_call(hook.session_id, hook.tool_use_id)
    if row is not None:
        return hook.tool_use_id
    attach = await ctx.repo.get_event(
        make_event_id(hook.session_id, hook.tool_use_id, "tool.attached"))
    if attach is None or attach.session_id != hook.session_id:
        log.warning("claude-code outcome of %s not recorded: no such call", hook.tool_use_id)
        return None
    return attach.tool_use_id


async def _unstarted_twin(ctx: HookContext, session_id: str, call: ToolUseBlock) -> str | None:
    """A claimed call with the same tool and input whose claim this key
    reserved and never started (its hook died before Claude Code ran it): the
    model's retry under a fresh id takes it over instead of parking again."""
    twin = await _twin(ctx, session_id, call, CallStatus.CLAIMED)
    if twin is None:
        return None
    try:
        view = await ctx.service.query(session_id, twin)
    except Exception:  # Temporal not answering: no takeover (the call parks anew)
        return None
    claim = view.release.claim if view is not None and view.release is not None else None
    if claim is None or claim.started or claim.claimed_by != f"key:{ctx.key.key_id}":
        return None
    return twin


async def _twin(ctx: HookContext, session_id: str, call: ToolUseBlock,
                status: CallStatus) -> str | None:
    """A call of the session in `status` with the same tool and input (the model
    called again with a fresh tool_use_id after "call again"), when `call` is new."""
    if not ctx.settings.attach_same_input and ctx.gate.has_call_id:
        return None
    since = utcnow() - timedelta(seconds=ctx.settings.attach_same_input_window_seconds)
    twin = await ctx.repo.oldest_with_input(
        CallFilters(session_id=session_id, tool_name=call.name, status=status, since=since),
        input_hash_forms(call.name, call.input))
    if twin is None or twin == call.id:
        return None
    return twin if await ctx.repo.get_call(session_id, call.id) is None else None


async def _started_twin(ctx: HookContext, session_id: str, call: ToolUseBlock) -> str | None:
    """The session's claimed call with this tool and input that this key's
    run started (an agent with no call ids reporting an outcome), oldest first."""
    twin = await _twin(ctx, session_id, call, CallStatus.CLAIMED)
    if twin is None:
        log.warning("%s outcome of %s not recorded: no started call with this input",
                    ctx.gate.name, call.name)
    return twin
