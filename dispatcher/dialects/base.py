"""What every agent dialect says: its hook events mapped onto a client-executed
call, its tools' classes (data), and its answers.

A coding agent that runs its own tools (Codex, Gemini CLI, opencode) sends a
hook event before and after each tool call. parkgate gates those calls on the
client-executed path Claude Code's hook uses (parkgate.api.agents.claude_code_hook):
the agent's session is the parkgate session, its tools are client tools named
as the agent spells them, the post-tool event files the outcome. A dialect is
only the translation: `parse` reads an event into an `AgentCall`, and
`allow` / `deny` / `waiting` write the answer the agent acts on.

Standard library only, and no heavier import at module load: the command
hook (a process per tool call) imports the registry to read the wire format.
Adding an agent is one module with a `Dialect` and a `register` call
(parkgate.dialects imports it).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from parkgate.workspaces.diffing import ImpactPreview

#: What an event is, for the gate: a call about to run (it decides), a run's
#: outcome, a failed run's outcome, a prompt, or something it only acknowledges.
Kind = Literal["pre", "post", "failure", "prompt", "other"]
#: The side-effect classes a tool table may name (parkgate.models.SideEffects).
CLASSES = frozenset({"none", "read", "write", "execute", "network"})
#: The API's id syntax (sessions, tool call ids).
ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
#: The hook endpoint of every dialect: /v1/hooks/{name}.
HOOK_PREFIX = "/v1/hooks/"
#: The reason a held call is denied with when nobody decided within the hold.
WAITING = ("this call is waiting for a human approval ({link}). Call the tool again with "
           "the same input to pick up the decision.")


class EventError(ValueError):
    """An event this dialect cannot read (the API answers 422 with the message)."""


@dataclass(frozen=True)
class AgentCall:
    """One hook event as the gate sees it. `call_id` is None where the agent
    sends none (Gemini CLI): the gate then files the call under a fresh id and
    a retry of the same tool and input in the session attaches to it."""

    kind: Kind
    session_id: str
    cwd: str = ""
    tool_name: str | None = None
    tool_input: dict[str, Any] | None = None
    call_id: str | None = None
    response: Any = None
    error: str | None = None
    prompt: str | None = None
    turn_id: str | None = None
    permission_mode: str | None = None


@dataclass(frozen=True)
class Dialect:
    """One agent's hook dialect. Subclasses override the answers and, where the
    agent names paths its own way, `views` and `preview`."""

    #: The agent's name in URLs and commands (`/v1/hooks/codex`, `parkgate hook codex`).
    name: str
    #: How people call it ("Codex").
    label: str
    #: Event names (the event's `hook_event_name`) by kind.
    events: Mapping[str, Kind]
    #: Its built-in tools and their class (settings `<name>_tools` add to it).
    tools: Mapping[str, str]
    #: The event field carrying the call id; None when the agent sends none.
    call_id_field: str | None = "tool_use_id"
    #: Tools whose input's `command` is a shell command line.
    shell_tools: frozenset[str] = frozenset()
    #: Timeout units of the agent's hook settings: 1 (seconds) or 1000 (ms).
    timeout_unit: int = 1
    #: Where an MCP tool's name starts (its class comes from the settings table).
    mcp_prefix: str | None = None

    # ---- the endpoint ---------------------------------------------------

    @property
    def path(self) -> str:
        """The endpoint this agent's hook posts to."""
        return HOOK_PREFIX + self.name

    @property
    def hook_command(self) -> str:
        """The command hook's subcommand (after the parkgate executable)."""
        return f"hook {self.name}"

    def recorded_name(self, tool_name: str, hosted: bool) -> str:
        """The name parkgate files the tool under: the agent's own, or
        `<agent>-<name>` when a parkgate-hosted tool has that name (`read_file`,
        `write_file`, `shell` ...: a session's client tool may not take it)."""
        return f"{self.name}-{tool_name}" if hosted else tool_name

    def own_name(self, recorded: str) -> str:
        """The agent's name for a tool parkgate recorded (`recorded_name` undone)."""
        prefix = f"{self.name}-"
        return recorded[len(prefix):] if recorded.startswith(prefix) else recorded

    def kind(self, event_name: Any) -> Kind | None:
        """The kind of an event name; None for a name this dialect does not know."""
        return self.events.get(event_name) if isinstance(event_name, str) else None

    @property
    def pre_events(self) -> frozenset[str]:
        return frozenset(n for n, k in self.events.items() if k == "pre")

    # ---- reading an event -----------------------------------------------

    def parse(self, body: Any) -> AgentCall:
        """The event as a call; EventError saying what is wrong with it."""
        if not isinstance(body, dict):
            raise EventError(f"a {self.label} hook event is a JSON object")
        name = body.get("hook_event_name")
        kind = self.kind(name)
        if kind is None:
            known = ", ".join(sorted(self.events))
            raise EventError(f"hook_event_name {name!r} is not a {self.label} event ({known})")
        session_id = _id(body, "session_id")
        cwd = body.get("cwd", "")
        if not isinstance(cwd, str):
            raise EventError("cwd must be a string")
        if kind in ("prompt", "other"):
            prompt = body.get("prompt")
            return AgentCall(kind=kind, session_id=session_id, cwd=cwd,
                             prompt=prompt if isinstance(prompt, str) else None,
                             turn_id=self.turn_of(body),
                             permission_mode=_text(body, "permission_mode"))
        tool_name = body.get("tool_name")
        if not isinstance(tool_name, str) or not tool_name:
            raise EventError(f"a {name} event needs tool_name (a non-empty string)")
        tool_input = body.get("tool_input", {})
        if tool_input is None:
            tool_input = {}
        if not isinstance(tool_input, dict):
            raise EventError("tool_input must be a JSON object")
        call_id = _id(body, self.call_id_field) if self.call_id_field else None
        failed, error = self.failed(body) if kind == "post" else (False, None)
        return AgentCall(
            kind="failure" if failed else kind, session_id=session_id, cwd=cwd,
            tool_name=tool_name, tool_input=tool_input, call_id=call_id,
            response=self.response(body), error=error, turn_id=self.turn_of(body),
            permission_mode=_text(body, "permission_mode"))

    def turn_of(self, body: Mapping[str, Any]) -> str | None:
        """The agent's turn id when it sends one (the call's turn); else None."""
        return None

    def response(self, body: Mapping[str, Any]) -> Any:
        """The tool's output in a post-tool event."""
        return body.get("tool_response")

    def failed(self, body: Mapping[str, Any]) -> tuple[bool, str | None]:
        """Whether a post-tool event reports a failed run, and its error."""
        return False, None

    def response_text(self, response: Any) -> str:
        """The tool's output as the call's result text."""
        if isinstance(response, str):
            return response
        return json.dumps(response, ensure_ascii=False, default=str)

    # ---- answers ----------------------------------------------------------

    def allow(self, reason: str, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
        """Let the call run (with the approver's edit when there is one)."""
        raise NotImplementedError

    def deny(self, reason: str) -> dict[str, Any]:
        """Do not run the call; the model reads `reason` (never empty)."""
        raise NotImplementedError

    def acknowledge(self) -> dict[str, Any]:
        """The answer to an event that decides nothing (post-tool, prompt)."""
        return {}

    def waiting(self, link: str) -> dict[str, Any]:
        """Nobody decided within the hold: a deny saying where and how to pick it up
        (the inbox and the request id, never the signed approval link)."""
        return self.deny("parkgate: " + WAITING.format(link=link))

    def is_decision(self, body: Any) -> bool:
        """`body` is an answer to a pre-tool event this agent acts on (the
        command hook fails closed on anything else)."""
        raise NotImplementedError

    def is_deny(self, body: Any) -> bool:
        """`body` blocks the call."""
        raise NotImplementedError

    # ---- what the call reaches and what the approver sees ---------------

    def views(self, tool_name: str, tool_input: Mapping[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        """The call as Claude Code tool calls (`Bash`, `Read`, `Write`, `Edit`,
        `LS`, `Glob`, `Grep`) for parkgate.client_tools.confinement; [] when it names
        no path parkgate can see."""
        if tool_name in self.shell_tools and isinstance(tool_input.get("command"), str):
            return [("Bash", {"command": tool_input["command"]})]
        return []

    def preview(self, tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                off_limits: tuple[str, ...] | list[str] = ()) -> ImpactPreview | None:
        """The approver's diff for a file write or patch; None for other calls."""
        return None

    def lease_seconds(self, tool_name: str, tool_input: Mapping[str, Any], default: float,
                      maximum: float) -> float:
        """How long the agent's run of the call may take before it counts as lost."""
        if tool_name in self.shell_tools:
            return min(max(default, 660.0), maximum)
        return min(default, maximum)


def _id(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not ID_RE.match(value):
        raise EventError(f"{name} must be 1-200 characters of letters, digits, '_', '.', "
                         f"':' or '-' (got {str(value)[:80]!r})")
    return value


def _text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


_REGISTRY: dict[str, Dialect] = {}


def register(dialect: Dialect) -> Dialect:
    """Make `dialect` answer at /v1/hooks/{name} and as `parkgate hook {name}`."""
    bad = {t: c for t, c in dialect.tools.items() if c not in CLASSES}
    if bad:
        raise ValueError(f"{dialect.name}: unknown classes {bad}")
    _REGISTRY[dialect.name] = dialect
    return dialect


def get(name: str) -> Dialect | None:
    """The registered dialect called `name`."""
    return _REGISTRY.get(name)


def names() -> list[str]:
    """Every registered dialect's name."""
    return sorted(_REGISTRY)


def file_change_preview(path: Any, workspace: str, off_limits: tuple[str, ...] | list[str],
                        *, content: Any = None,
                        edit: tuple[Any, Any, bool] | None = None) -> ImpactPreview | None:
    """The approver's diff of an agent's file write (`content`) or edit
    (`edit`: old text, new text, replace all), read as Claude Code's Write and
    Edit against the file on disk; a relative `path` is the workspace's. None
    when `path` is not a path."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    from parkgate.dialects.claude_code import file_preview

    full = path if os.path.isabs(path) else os.path.join(workspace, path)
    if edit is None:
        return file_preview("Write", {"file_path": full, "content": content}, workspace,
                            off_limits)
    old, new, replace_all = edit
    return file_preview("Edit", {"file_path": full, "old_string": old, "new_string": new,
                                 "replace_all": replace_all}, workspace, off_limits)
