"""Gemini CLI (`@google/gemini-cli`): its BeforeTool / AfterTool command hooks.

Gemini's events carry `session_id`, `cwd`, `tool_name` (`run_shell_command`,
`write_file`, `replace`, `read_file` ...), `tool_input`, and after the run
`tool_response` (`llmContent`, `returnDisplay`, `error`). They carry NO call
id: the gate files each BeforeTool under a fresh id, a retry of the same tool
and input in the session attaches to the call still waiting, and AfterTool
reports the outcome of the session's started call with that tool and input.

Answers: `{"decision": "deny", "reason": R}` blocks (the model reads R);
`{"decision": "allow"}` lets it run, with `hookSpecificOutput.tool_input` for
an approver's edit (Gemini merges it over the call's input). The hook's
`timeout` is in milliseconds, and a timeout lets the tool run: the command
hook answers before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from parkgate.dialects.base import Dialect, file_change_preview, register

if TYPE_CHECKING:
    from parkgate.workspaces.diffing import ImpactPreview

#: Gemini CLI's built-in tools and their class.
TOOLS: dict[str, str] = {
    "read_file": "read", "read_many_files": "read", "list_directory": "read",
    "glob": "read", "grep_search": "read", "search_file_content": "read",
    "get_internal_docs": "read", "read_mcp_resource": "read", "list_mcp_resources": "read",
    "write_file": "write", "replace": "write", "edit": "write",
    "run_shell_command": "execute", "invoke_agent": "execute", "activate_skill": "execute",
    "web_fetch": "network", "google_web_search": "network",
    "write_todos": "none", "save_memory": "write", "ask_user": "none",
    "enter_plan_mode": "none", "exit_plan_mode": "none", "update_topic": "none",
    "complete_task": "none",
}
SHELL_TOOLS = frozenset({"run_shell_command"})
#: Gemini's file tools as the Claude Code tool parkgate's confinement and diff know.
_AS_CLAUDE = {"read_file": "Read", "write_file": "Write", "replace": "Edit", "edit": "Edit"}
_GLOB = re.compile(r"[*?\[]")
#: Brace alternatives expanded per entry, at most (glob libraries expand them).
_MAX_EXPANSIONS = 64
_DIRS = {"list_directory": "LS", "glob": "Glob", "grep_search": "Grep",
         "search_file_content": "Grep"}


@dataclass(frozen=True)
class GeminiDialect(Dialect):
    """Gemini CLI's hook dialect."""

    def failed(self, body: Mapping[str, Any]) -> tuple[bool, str | None]:
        response = body.get("tool_response")
        error = response.get("error") if isinstance(response, dict) else None
        if not error:
            return False, None
        message = error.get("message") if isinstance(error, dict) else error
        return True, str(message or "the tool failed")

    def response_text(self, response: Any) -> str:
        if isinstance(response, dict):
            content = response.get("llmContent")
            if isinstance(content, str):
                return content
            if content is not None:
                return super().response_text(content)
        return super().response_text(response)

    def allow(self, reason: str, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": "allow", "reason": reason}
        if updated_input is not None:
            out["hookSpecificOutput"] = {"hookEventName": "BeforeTool",
                                         "tool_input": updated_input}
        return out

    def deny(self, reason: str) -> dict[str, Any]:
        return {"decision": "deny", "reason": reason.strip() or "parkgate"}

    def is_decision(self, body: Any) -> bool:
        return isinstance(body, dict) and (body.get("decision") == "allow"
                                           or self.is_deny(body))

    def is_deny(self, body: Any) -> bool:
        return isinstance(body, dict) and body.get("decision") in ("deny", "block") \
            and isinstance(body.get("reason"), str) and bool(body["reason"].strip())

    def views(self, tool_name: str, tool_input: Mapping[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        if tool_name in _AS_CLAUDE:
            path = tool_input.get("file_path") or tool_input.get("absolute_path")
            return [(_AS_CLAUDE[tool_name], {"file_path": path})] \
                if isinstance(path, str) and path else []
        if tool_name == "read_many_files":
            return many_files(tool_input.get("include"), tool_input.get("paths"))
        if tool_name in _DIRS:
            path = tool_input.get("dir_path") or tool_input.get("path") or ""
            view: dict[str, Any] = {"path": path if isinstance(path, str) else ""}
            if tool_name == "glob" and isinstance(tool_input.get("pattern"), str):
                view["pattern"] = tool_input["pattern"]
            return [(_DIRS[tool_name], view)]
        if tool_name == "run_shell_command":
            command = tool_input.get("command")
            directory = tool_input.get("dir_path") or tool_input.get("directory")
            views: list[tuple[str, dict[str, Any]]] = []
            if isinstance(command, str):
                views.append(("Bash", {"command": command}))
            if isinstance(directory, str) and directory:
                views.append(("LS", {"path": directory}))
            return views
        return []

    def preview(self, tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                off_limits: tuple[str, ...] | list[str] = ()) -> ImpactPreview | None:
        """write_file and replace as Claude Code's Write and Edit (the diff
        against the file on disk); a relative path is the workspace's."""
        if tool_name not in ("write_file", "replace", "edit"):
            return None
        path = tool_input.get("file_path")
        if tool_name == "write_file":
            return file_change_preview(path, workspace, off_limits,
                                       content=tool_input.get("content"))
        replace_all = bool(tool_input.get("allow_multiple")
                           or (tool_input.get("expected_replacements") or 1) > 1)
        return file_change_preview(path, workspace, off_limits, edit=(
            tool_input.get("old_string"), tool_input.get("new_string"), replace_all))


def many_files(*lists: Any) -> list[tuple[str, dict[str, Any]]]:
    """read_many_files' paths and glob patterns (`include`, and `paths` before
    it) as Claude Code's Read and Glob, relative to the working directory."""
    views: list[tuple[str, dict[str, Any]]] = []
    for entries in lists:
        for entry in entries if isinstance(entries, list) else [entries]:
            if not isinstance(entry, str) or not entry:
                continue
            expanded = braces(entry)
            if expanded is None:  # too many alternatives to read: as if it read /
                views.append(("LS", {"path": "/"}))
                continue
            for one in expanded:
                views.append(("Glob", {"path": "", "pattern": one}) if _GLOB.search(one)
                             else ("Read", {"file_path": one}))
    return views


def braces(pattern: str) -> list[str] | None:
    """`pattern` with its `{a,b}` alternatives expanded (as a glob library
    does before matching: `{/etc/x,y}` names /etc/x); None past _MAX_EXPANSIONS."""
    out: list[str] = []
    todo = [pattern]
    while todo:
        item = todo.pop(0)
        group = _first_group(item)
        if group is None:
            out.append(item)
        else:
            start, end, parts = group
            todo += [item[:start] + part + item[end + 1:] for part in parts]
        if len(out) + len(todo) > _MAX_EXPANSIONS:
            return None
    return out


def _first_group(text: str) -> tuple[int, int, list[str]] | None:
    """The first `{...}` holding a top-level comma: its bounds and alternatives."""
    for start, char in enumerate(text):
        if char != "{":
            continue
        depth, cuts = 0, [start]
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    if len(cuts) == 1:
                        break  # no comma: a literal brace
                    cuts.append(i)
                    return start, i, [text[a + 1:b] for a, b in pairwise(cuts)]
            elif text[i] == "," and depth == 1:
                cuts.append(i)
    return None


GEMINI = register(GeminiDialect(
    name="gemini", label="Gemini CLI",
    events={"BeforeTool": "pre", "AfterTool": "post", "BeforeAgent": "prompt",
            "SessionStart": "other", "SessionEnd": "other", "AfterAgent": "other"},
    tools=TOOLS, call_id_field=None, shell_tools=SHELL_TOOLS, timeout_unit=1000,
))
