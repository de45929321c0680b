"""Codex (`@openai/codex`): its PreToolUse / PostToolUse command hooks.

Codex runs its tools itself and asks its hooks first. Its PreToolUse event
carries `session_id`, `turn_id`, `cwd`, `tool_name` (`Bash` for a shell
call, its `tool_input` `{"command": ...}`; `mcp__<server>__<tool>`),
`tool_input` and `tool_use_id`; PostToolUse adds `tool_response` (the output
as a string). A patch arrives as a `Bash` call whose command is
`apply_patch <<'EOF' ... EOF` (or as `apply_patch` where the model has that
tool): the approver sees the patch and the files it touches.

Codex's answers: a deny is `permissionDecision: "deny"` with a NON-EMPTY
`permissionDecisionReason` (an empty reason, `ask`, exit 1, output that is not
JSON or a hook timeout all let the tool run); an allow is no decision at all
(`{}`), or `permissionDecision: "allow"` with `updatedInput` for an
approver's edit. Codex has no `ask` an external approver could use, so a call
still waiting at the end of the hold is denied with "call again".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parkgate.dialects.base import Dialect, register

if TYPE_CHECKING:
    from parkgate.workspaces.diffing import ImpactPreview

#: Codex's tools as its hooks name them, and their class.
TOOLS: dict[str, str] = {
    "Bash": "execute", "exec_command": "execute", "shell": "execute",
    "local_shell": "execute", "unified_exec": "execute", "write_stdin": "execute",
    "apply_patch": "write",
    "read_file": "read", "list_dir": "read", "grep_files": "read", "view_image": "read",
    "update_plan": "none",
    "web_search": "network",
}
#: Tools whose `command` input is a shell command line.
SHELL_TOOLS = frozenset({"Bash", "exec_command", "shell", "local_shell", "unified_exec"})
#: The fields an apply_patch call may carry its patch text in.
PATCH_FIELDS = ("command", "input", "patch")
_ADD, _UPDATE, _DELETE, _MOVE = ("*** Add File: ", "*** Update File: ", "*** Delete File: ",
                                 "*** Move to: ")


@dataclass(frozen=True)
class Patch:
    """What an apply_patch touches: (verb, path) per file, and its text."""

    files: list[tuple[str, str]]
    text: str


def patch_of(tool_input: Mapping[str, Any]) -> Patch | None:
    """The patch an apply_patch input carries; None when it carries none."""
    for name in PATCH_FIELDS:
        value = tool_input.get(name)
        if isinstance(value, list):  # ["apply_patch", "<patch>"]
            value = next((v for v in value if isinstance(v, str) and "*** Begin Patch" in v),
                         None)
        if isinstance(value, str) and "*** Begin Patch" in value:
            return Patch(files=_files(value), text=value)
    return None


def _files(text: str) -> list[tuple[str, str]]:
    files: list[tuple[str, str]] = []
    for line in text.splitlines():
        for prefix, verb in ((_ADD, "create"), (_UPDATE, "modify"), (_DELETE, "delete"),
                             (_MOVE, "create")):
            if line.startswith(prefix) and line[len(prefix):].strip():
                files.append((verb, line[len(prefix):].strip()))
    return files


@dataclass(frozen=True)
class CodexDialect(Dialect):
    """Codex's hook dialect."""

    def turn_of(self, body: Mapping[str, Any]) -> str | None:
        turn = body.get("turn_id")
        return turn if isinstance(turn, str) else None

    def allow(self, reason: str, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
        if updated_input is None:
            return {}  # no decision: Codex runs the call (an `allow` alone is refused)
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "allow",
                                       "updatedInput": updated_input}}

    def deny(self, reason: str) -> dict[str, Any]:
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "deny",
                                       "permissionDecisionReason": reason.strip() or "parkgate"}}

    def is_decision(self, body: Any) -> bool:
        if body == {}:
            return True
        out = body.get("hookSpecificOutput") if isinstance(body, dict) else None
        if not isinstance(out, dict) or out.get("hookEventName") != "PreToolUse":
            return False
        if out.get("permissionDecision") == "allow":
            return isinstance(out.get("updatedInput"), dict)
        return self.is_deny(body)

    def is_deny(self, body: Any) -> bool:
        out = body.get("hookSpecificOutput") if isinstance(body, dict) else None
        return isinstance(out, dict) and out.get("permissionDecision") == "deny" \
            and isinstance(out.get("permissionDecisionReason"), str) \
            and bool(out["permissionDecisionReason"].strip())

    def views(self, tool_name: str, tool_input: Mapping[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        patch = patch_of(tool_input) if tool_name == "apply_patch" or \
            tool_name in SHELL_TOOLS else None
        writes = [("Write", {"file_path": path}) for _, path in patch.files] if patch else []
        if tool_name == "apply_patch":
            return writes
        if tool_name in ("read_file", "view_image"):
            path = tool_input.get("file_path") or tool_input.get("path")
            return [("Read", {"file_path": path})] if isinstance(path, str) else []
        if tool_name in ("list_dir", "grep_files"):
            path = tool_input.get("dir_path") or tool_input.get("path")
            return [("LS", {"path": path})] if isinstance(path, str) else []
        command = tool_input.get("command") or tool_input.get("cmd")
        if isinstance(command, list):
            command = " ".join(str(c) for c in command)
        if tool_name in SHELL_TOOLS and isinstance(command, str):
            return [*writes, ("Bash", {"command": command})]
        return []

    def preview(self, tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                off_limits: tuple[str, ...] | list[str] = ()) -> ImpactPreview | None:
        if tool_name != "apply_patch" and tool_name not in SHELL_TOOLS:
            return None
        patch = patch_of(tool_input)
        if patch is None:
            return None
        from parkgate.workspaces.diffing import ImpactPreview

        shown = [path if not os.path.isabs(path) else os.path.relpath(path, workspace)
                 if path.startswith(workspace.rstrip("/") + "/") else path
                 for _, path in patch.files]
        return ImpactPreview(
            projected_impact=[f"will {verb} {s}" for (verb, _), s in zip(patch.files, shown,
                                                                           strict=True)]
            or ["will apply a patch"],
            diff=patch.text, files=shown)

    def lease_seconds(self, tool_name: str, tool_input: Mapping[str, Any], default: float,
                      maximum: float) -> float:
        timeout = tool_input.get("timeout_ms")
        if tool_name in SHELL_TOOLS and isinstance(timeout, int | float) and timeout > 0:
            return min(max(default, timeout / 1000 + 60), maximum)
        return super().lease_seconds(tool_name, tool_input, default, maximum)


CODEX = register(CodexDialect(
    name="codex", label="Codex",
    events={"PreToolUse": "pre", "PostToolUse": "post", "UserPromptSubmit": "prompt",
            "SessionStart": "other", "Stop": "other"},
    tools=TOOLS, shell_tools=SHELL_TOOLS, mcp_prefix="mcp__",
))
