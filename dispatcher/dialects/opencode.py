"""opencode (`opencode-ai`): its plugin's `tool.execute.before` / `after` events.

opencode has no command hooks; a plugin (`.opencode/plugin/parkgate.js`,
written by `parkgate opencode install`, shipped beside this module as
`opencode_plugin.js`) sees every tool call before and after it runs and
posts it here. The event is the plugin's own JSON, built from opencode's hook
arguments: `hook_event_name` (`tool.execute.before` / `tool.execute.after`),
`session_id` (opencode's `sessionID`), `call_id` (`callID`, the model's tool
call id), `tool_name` (`tool`: `bash`, `write`, `edit`, `read` ...),
`tool_input` (the call's `args`), `cwd` (the plugin's project directory), and
after the run `tool_response` (`title`, `output`, `metadata`).

Answers: `{"decision": "allow"}` lets the call run, with `args` for an
approver's edit (the plugin writes it into opencode's args object, which is
what the tool runs with); `{"decision": "deny", "reason": R}` makes the plugin
throw R, which opencode reports to the model as the tool's error. The plugin
throws on anything else too: parkgate unreachable, an error status, an answer
it cannot read, no answer within its deadline (opencode itself has no hook
timeout, so the plugin's deadline sits above parkgate's hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parkgate.dialects.base import Dialect, file_change_preview, register
from parkgate.dialects.codex import patch_of

if TYPE_CHECKING:
    from parkgate.workspaces.diffing import ImpactPreview

#: opencode's built-in tools (1.18) and their class; settings `opencode_tools` add to it.
TOOLS: dict[str, str] = {
    "read": "read", "glob": "read", "grep": "read", "list": "read", "lsp": "read",
    "codesearch": "read",
    "write": "write", "edit": "write", "multiedit": "write", "patch": "write",
    "apply_patch": "write",
    "bash": "execute", "task": "execute", "skill": "execute",
    "webfetch": "network", "websearch": "network",
    "todowrite": "none", "todoread": "none", "question": "none", "invalid": "none",
    "plan_enter": "none", "plan_exit": "none",
}
SHELL_TOOLS = frozenset({"bash"})
#: The tools that apply a patch (`patchText`, Codex's apply_patch format).
PATCH_TOOLS = frozenset({"patch", "apply_patch"})
#: The plugin file's name, in `.opencode/plugin/` or `~/.config/opencode/plugin/`.
PLUGIN_FILE = "parkgate.js"
#: The plugin's deadline above parkgate's hold (the answer needs a moment after it).
PLUGIN_MARGIN_SECONDS = 25


@dataclass(frozen=True)
class OpencodeDialect(Dialect):
    """opencode's dialect (the plugin's events)."""

    def response(self, body: Mapping[str, Any]) -> Any:
        return body.get("tool_response")

    def response_text(self, response: Any) -> str:
        if isinstance(response, dict) and isinstance(response.get("output"), str):
            return str(response["output"])
        return super().response_text(response)

    def allow(self, reason: str, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": "allow", "reason": reason}
        if updated_input is not None:
            out["args"] = updated_input
        return out

    def deny(self, reason: str) -> dict[str, Any]:
        return {"decision": "deny", "reason": reason.strip() or "parkgate"}

    def is_decision(self, body: Any) -> bool:
        if not isinstance(body, dict):
            return False
        if body.get("decision") == "allow":
            return "args" not in body or isinstance(body["args"], dict)
        return self.is_deny(body)

    def is_deny(self, body: Any) -> bool:
        return isinstance(body, dict) and body.get("decision") == "deny" \
            and isinstance(body.get("reason"), str) and bool(body["reason"].strip())

    def views(self, tool_name: str, tool_input: Mapping[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        path = tool_input.get("filePath")
        if tool_name in ("read", "write", "edit", "multiedit", "lsp"):
            as_claude = {"read": "Read", "lsp": "Read", "write": "Write"}.get(tool_name, "Edit")
            return [(as_claude, {"file_path": path})] if isinstance(path, str) and path else []
        if tool_name in PATCH_TOOLS:  # Codex's patch format, in `patchText`
            patch = patch_of({"patch": tool_input.get("patchText")})
            return [("Write", {"file_path": p}) for _, p in patch.files] if patch else []
        if tool_name in ("list", "glob", "grep"):
            where = tool_input.get("path")
            view: dict[str, Any] = {"path": where if isinstance(where, str) else ""}
            if tool_name == "glob" and isinstance(tool_input.get("pattern"), str):
                view["pattern"] = tool_input["pattern"]
            return [({"list": "LS", "glob": "Glob", "grep": "Grep"}[tool_name], view)]
        if tool_name == "bash":
            views: list[tuple[str, dict[str, Any]]] = []
            if isinstance(tool_input.get("command"), str):
                views.append(("Bash", {"command": tool_input["command"]}))
            workdir = tool_input.get("workdir")
            if isinstance(workdir, str) and workdir:
                views.append(("LS", {"path": workdir}))
            return views
        return []

    def preview(self, tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                off_limits: tuple[str, ...] | list[str] = ()) -> ImpactPreview | None:
        """write and edit as Claude Code's Write and Edit (the diff against the
        file on disk); a relative path is the workspace's."""
        if tool_name not in ("write", "edit"):
            return None
        path = tool_input.get("filePath")
        if tool_name == "write":
            return file_change_preview(path, workspace, off_limits,
                                       content=tool_input.get("content"))
        return file_change_preview(path, workspace, off_limits, edit=(
            tool_input.get("oldString"), tool_input.get("newString"),
            bool(tool_input.get("replaceAll"))))

    def lease_seconds(self, tool_name: str, tool_input: Mapping[str, Any], default: float,
                      maximum: float) -> float:
        timeout = tool_input.get("timeout")  # bash: milliseconds
        if tool_name in SHELL_TOOLS and isinstance(timeout, int | float) and timeout > 0:
            return min(max(default, timeout / 1000 + 60), maximum)
        return super().lease_seconds(tool_name, tool_input, default, maximum)


OPENCODE = register(OpencodeDialect(
    name="opencode", label="opencode",
    events={"tool.execute.before": "pre", "tool.execute.after": "post"},
    tools=TOOLS, call_id_field="call_id", shell_tools=SHELL_TOOLS,
))
