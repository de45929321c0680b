"""Claude Code behind the gate: its tools as client tools, and its hook answers.

Claude Code runs its own tools; parkgate decides and records (the client-executed
calls). This module is the pure part: which side-effect class each Claude Code
tool has (data, extendable in settings), the approver's diff for its file
tools computed against the file on disk, and the hook output JSON.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from parkgate.client_tools.declared import ClientToolSpec
from parkgate.dialects.claude_code_wire import (
    COMMAND_MARGIN,
    CONFIRM_PARAM,  # noqa: F401 (re-exported)
    HOOK_COMMAND,
    HOOK_PATH,
    KEY_ENV,
    START_FIELD,  # noqa: F401
    TIMEOUT_MARGIN,
    Decision,  # noqa: F401 (re-exported: the hook answers' names live here too)
    pre_tool_use,  # noqa: F401
)
from parkgate.models import SideEffects
from parkgate.workspaces.diffing import ImpactPreview, unified_diff

#: Claude Code's built-in tools and their class (by capability).
BUILTIN_TOOLS: dict[str, SideEffects] = {
    "Read": SideEffects.READ, "Glob": SideEffects.READ, "Grep": SideEffects.READ,
    "LS": SideEffects.READ, "NotebookRead": SideEffects.READ, "TodoWrite": SideEffects.NONE,
    "TodoRead": SideEffects.NONE, "ExitPlanMode": SideEffects.NONE,
    "ToolSearch": SideEffects.NONE, "AskUserQuestion": SideEffects.NONE,
    "Edit": SideEffects.WRITE, "MultiEdit": SideEffects.WRITE, "Write": SideEffects.WRITE,
    "NotebookEdit": SideEffects.WRITE,
    "Bash": SideEffects.EXECUTE, "BashOutput": SideEffects.READ, "KillShell": SideEffects.EXECUTE,
    "Task": SideEffects.EXECUTE, "Agent": SideEffects.EXECUTE,
    "WebFetch": SideEffects.NETWORK, "WebSearch": SideEffects.NETWORK,
}

#: Claude Code names MCP tools `mcp__<server>__<tool>`.
MCP_PREFIX = "mcp__"
#: parkgate's own MCP-sourced tools are `<server>__<tool>`.
_SEPARATOR = "__"

Fallback = Literal["ask", "deny", "defer"]


def deployment_class(
    tool_name: str,
    extra: Mapping[str, str],
    known: Callable[[str], SideEffects | None] = lambda _name: None,
) -> tuple[SideEffects, str] | None:
    """The class this deployment gives a tool name, and where it comes from:
    settings first (`claude_code_tools`, exact name, then glob patterns), then
    Claude Code's built-ins, then an MCP tool's class where parkgate knows its
    server (`known("server__tool")`); None when the deployment says nothing."""
    if tool_name in extra:
        return SideEffects(extra[tool_name]), "claude_code_tools"
    for pattern, cls in extra.items():
        if fnmatch.fnmatchcase(tool_name, pattern):
            return SideEffects(cls), f"claude_code_tools ({pattern})"
    if tool_name in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[tool_name], "Claude Code's built-in tools"
    if tool_name.startswith(MCP_PREFIX):
        rest = tool_name[len(MCP_PREFIX):]
        if _SEPARATOR in rest:
            found = known(rest)
            if found is not None:
                return found, f"parkgate's MCP tool {rest}"
    return None


def side_effects_for(
    tool_name: str,
    extra: Mapping[str, str],
    known: Callable[[str], SideEffects | None] = lambda _name: None,
) -> SideEffects:
    """The class of a Claude Code tool: the deployment's (`deployment_class`),
    else EXECUTE (a tool parkgate knows nothing of can do anything)."""
    found = deployment_class(tool_name, extra, known)
    return found[0] if found is not None else SideEffects.EXECUTE


#: Claude Code's longest Bash run (10 minutes) and a margin for its PostToolUse.
_BASH_MAX_SECONDS = 600
_REPORT_MARGIN = 60


def lease_seconds(tool_name: str, tool_input: Mapping[str, Any], default: float,
                  maximum: float) -> float:
    """The claim's lease: long enough for the run Claude Code may make (a Bash
    `timeout` in ms, else its 10-minute cap; a subagent gets the maximum), so a
    slow run is not taken for a lost one."""
    wanted = default
    if tool_name == "Bash":
        timeout = tool_input.get("timeout")
        run = timeout / 1000 if isinstance(timeout, int | float) and timeout > 0 \
            else _BASH_MAX_SECONDS
        wanted = max(default, min(run, _BASH_MAX_SECONDS) + _REPORT_MARGIN)
    elif tool_name in ("Task", "Agent"):
        wanted = maximum
    return min(wanted, maximum)


def client_tool(tool_name: str, side_effects: SideEffects) -> ClientToolSpec:
    """The client tool a Claude Code tool is declared as (any object input)."""
    return ClientToolSpec(name=tool_name, description=f"Claude Code's {tool_name} tool",
                          input_schema={"type": "object"}, side_effects=side_effects)


# --------------------------------------------------------------------------
# What the approver sees for Claude Code's file tools
# --------------------------------------------------------------------------

FILE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
_MAX_READ = 2 * 1024 * 1024


def file_preview(tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                 off_limits: Sequence[str] = ()) -> ImpactPreview | None:
    """The diff of a Write/Edit/MultiEdit against the file on disk (read-only);
    None for other tools or inputs that are not such a call.

    A path under `off_limits` (parkgate's data, secrets, logs) is never read:
    its content would reach the approval page, Slack and e-mail."""
    if tool_name not in FILE_TOOLS:
        return None
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(path, str) or not os.path.isabs(path) or "\x00" in path:
        return None
    shown = _shown_path(path, workspace)
    if _is_under_any(path, off_limits):
        return ImpactPreview(
            projected_impact=[f"will write {shown}: parkgate's own data, secrets or logs "
                              "(not shown)"], files=[shown])
    old = _read(path)
    if tool_name == "NotebookEdit":
        return ImpactPreview(projected_impact=[f"will edit notebook {shown}"], files=[shown])
    if tool_name == "Write":
        new = tool_input.get("content")
        if not isinstance(new, str):
            return None
    else:
        edits = tool_input.get("edits") if tool_name == "MultiEdit" else [tool_input]
        if old is None or not isinstance(edits, list):
            return ImpactPreview(projected_impact=[f"will edit {shown} (not readable here)"],
                                 files=[shown])
        new = _apply_edits(old, edits)
        if new is None:
            return ImpactPreview(
                projected_impact=[f"will edit {shown} (the text to replace is not in the file)"],
                files=[shown])
    verb = "create" if old is None else "modify"
    return ImpactPreview(projected_impact=[f"will {verb} {shown}"],
                         diff=unified_diff(old or "", new, shown), files=[shown])


def _shown_path(path: str, workspace: str) -> str:
    root = os.path.realpath(workspace)
    real = os.path.realpath(path)
    return os.path.relpath(real, root) if real.startswith(root + os.sep) else path


def _is_under_any(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False


def _read(path: str) -> str | None:
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_READ:
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _apply_edits(text: str, edits: list[Any]) -> str | None:
    for edit in edits:
        if not isinstance(edit, dict):
            return None
        old, new = edit.get("old_string"), edit.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str) or (old and old not in text):
            return None
        text = text.replace(old, new) if edit.get("replace_all") else text.replace(old, new, 1)
    return text


# --------------------------------------------------------------------------
# Hook answers (Claude Code's hook output JSON)
# --------------------------------------------------------------------------


def response_text(tool_response: Any) -> str:
    """Claude Code's tool_response as the call's result text."""
    if isinstance(tool_response, str):
        return tool_response
    return json.dumps(tool_response, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------
# Claude Code settings: the hooks `parkgate claude-code install` merges in
# --------------------------------------------------------------------------

#: The events parkgate answers (PreToolUse decides; the others record:
#: UserPromptSubmit the turn's prompt, the post hooks the outcome).
EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure")


def hook_entry(event: str, base_url: str, *, command: bool, wait_seconds: float,
               fail_closed: bool, executable: str = "parkgate") -> dict[str, Any]:
    """One hook (HTTP or command) for `event`; PreToolUse blocks on failure when
    `fail_closed` (parkgate unreachable, timed out, a bad answer). A command
    hook runs `executable` (the absolute path `install` ran from)."""
    timeout = int(wait_seconds) + TIMEOUT_MARGIN
    hook: dict[str, Any]
    if command:
        # The command's own deadline sits inside the hook's timeout (it answers
        # before Claude Code gives up), and spares it reading the settings.
        hook = {"type": "command", "timeout": timeout,
                "command": f"{shlex.quote(executable)} {HOOK_COMMAND.removeprefix('parkgate ')} "
                           f"--url {shlex.quote(base_url.rstrip('/'))} "
                           f"--timeout {timeout - COMMAND_MARGIN}"}
    else:
        hook = {"type": "http", "url": base_url.rstrip("/") + HOOK_PATH,
                "headers": {"Authorization": f"Bearer ${KEY_ENV}"},
                "allowedEnvVars": [KEY_ENV], "timeout": timeout}
    if event == "PreToolUse" and fail_closed:
        hook["onFailure"] = "block"
    return {"matcher": "*", "hooks": [hook]}


def is_parkgate_hook(hook: Any) -> bool:
    """A hook an earlier install wrote (replaced, never duplicated)."""
    if not isinstance(hook, dict):
        return False
    return HOOK_PATH in str(hook.get("url", "")) or HOOK_COMMAND in str(hook.get("command", ""))


def merge_settings(existing: Mapping[str, Any], base_url: str, *, command: bool,
                   wait_seconds: float, fail_closed: bool,
                   executable: str = "parkgate") -> dict[str, Any]:
    """`existing` Claude Code settings with parkgate's hooks in, everything else kept."""
    merged = dict(existing)
    hooks = dict(merged.get("hooks") or {})
    for event in EVENTS:
        kept = []
        for group in hooks.get(event) or []:
            if not isinstance(group, dict):
                kept.append(group)
                continue
            inner = [h for h in group.get("hooks") or [] if not is_parkgate_hook(h)]
            if inner:
                kept.append({**group, "hooks": inner})
        kept.append(hook_entry(event, base_url, command=command, wait_seconds=wait_seconds,
                               fail_closed=fail_closed, executable=executable))
        hooks[event] = kept
    merged["hooks"] = hooks
    return merged
