"""Coding agents' hook dialects: one home per agent for its events, its tools'
classes and its answers. `base` is the interface and the registry; `codex`,
`gemini` and `opencode` each register a dialect (importing this package
registers them all; standard library only, because the command hook imports
it). Claude Code, the first agent, keeps its own richer hook: its tools and
answers in `claude_code`, its wire format (stdlib only) in `claude_code_wire`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from parkgate.dialects import codex, gemini, opencode  # noqa: F401 (each registers its dialect)
from parkgate.dialects.base import AgentCall, Dialect, EventError, get, names, register

if TYPE_CHECKING:
    from parkgate.workspaces.diffing import ImpactPreview

__all__ = ["AgentCall", "Dialect", "EventError", "agent_preview", "get", "names", "register"]


def agent_preview(tool_name: str, tool_input: Mapping[str, Any], workspace: str,
                  off_limits: Sequence[str] = ()) -> ImpactPreview | None:
    """The approver's diff for an agent's file write or patch (the dialect whose
    recorded name it is, else the first that knows the tool); None for any other call."""
    for name in names():
        dialect = get(name)
        if dialect is None:
            continue
        own = dialect.own_name(tool_name)
        if own in dialect.tools:
            shown = dialect.preview(own, tool_input, workspace, list(off_limits))
            if shown is not None:
                return shown
    return None
