"""What differs between the agents whose hooks gate client-executed calls.

parkgate.api.agents.claude_code_hook holds the one path every agent's hook takes
(declare the tool, judge its paths, submit, hold, claim, start, report); a
`Gate` is what it asks of the agent: its tools' classes, how long to hold,
the lease of a run, the paths a call reaches, and the answers. `CLAUDE_CODE`
is Claude Code's; `DialectGate` wraps any parkgate.dialects dialect.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from typing import Any

from parkgate.client_tools.declared import ClientToolSpec
from parkgate.dialects import claude_code
from parkgate.dialects.base import Dialect
from parkgate.models import SideEffects
from parkgate.settings import Settings
from parkgate.settings.agents import tool_classes, wait_seconds

Known = Callable[[str], SideEffects | None]


class Gate:
    """Claude Code's gate (the default; other agents override it)."""

    name = "claude-code"
    label = "Claude Code"
    #: The call's turn when the event names none.
    turn_id = "claude-code"
    #: The agent sends a call id with every event.
    has_call_id = True

    def wait_seconds(self, settings: Settings) -> float:
        return settings.claude_code_wait_seconds

    def side_effects(self, settings: Settings, tool_name: str, known: Known) -> SideEffects:
        return claude_code.side_effects_for(tool_name, settings.claude_code_tools, known)

    def client_tool(self, tool_name: str, side_effects: SideEffects) -> ClientToolSpec:
        return claude_code.client_tool(tool_name, side_effects)

    def lease_seconds(self, tool_name: str, tool_input: Mapping[str, Any], default: float,
                      maximum: float) -> float:
        return claude_code.lease_seconds(tool_name, tool_input, default, maximum)

    def views(self, tool_name: str, tool_input: dict[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        """The call as Claude Code calls, for the confinement checks."""
        return [(tool_name, tool_input)]

    def allow(self, reason: str, updated_input: dict[str, Any] | None,
              note: str | None = None) -> dict[str, Any]:
        """Let it run (edited: `updated_input`); `note` tells the model what an
        approver changed (Claude Code's `additionalContext`)."""
        return claude_code.pre_tool_use("allow", reason, updated_input=updated_input,
                                        context=note)

    def deny(self, reason: str) -> dict[str, Any]:
        return claude_code.pre_tool_use("deny", reason)

    def acknowledge(self) -> dict[str, Any]:
        return {}

    def waiting(self, settings: Settings, link: str) -> dict[str, Any]:
        """Nobody decided within the hold: the configured answer."""
        mode = settings.claude_code_fallback
        if mode in ("ask", "defer"):
            return claude_code.pre_tool_use(mode, f"parkgate: waiting for approval at {link}")
        return self.deny(f"parkgate: this call is waiting for a human approval ({link}). "
                         "Call the tool again with the same input to pick up the decision.")

    def response_text(self, response: Any) -> str:
        return claude_code.response_text(response)


CLAUDE_CODE = Gate()


class DialectGate(Gate):
    """An agent's gate from its dialect: its table over the settings', its
    hold setting (`<name>_wait_seconds`), its answers."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.name, self.label, self.turn_id = dialect.name, dialect.label, dialect.name
        self.has_call_id = dialect.call_id_field is not None

    def wait_seconds(self, settings: Settings) -> float:
        return wait_seconds(settings, self.name)

    def side_effects(self, settings: Settings, tool_name: str, known: Known) -> SideEffects:
        found = deployment_class(self.dialect, tool_classes(settings, self.name),
                                 self.dialect.own_name(tool_name), known)
        return found[0] if found is not None else SideEffects.EXECUTE

    def client_tool(self, tool_name: str, side_effects: SideEffects) -> ClientToolSpec:
        own = self.dialect.own_name(tool_name)
        return ClientToolSpec(name=tool_name, description=f"{self.label}'s {own} tool",
                              input_schema={"type": "object"}, side_effects=side_effects)

    def lease_seconds(self, tool_name: str, tool_input: Mapping[str, Any], default: float,
                      maximum: float) -> float:
        return self.dialect.lease_seconds(self.dialect.own_name(tool_name), tool_input,
                                          default, maximum)

    def views(self, tool_name: str, tool_input: dict[str, Any]
              ) -> list[tuple[str, dict[str, Any]]]:
        return self.dialect.views(self.dialect.own_name(tool_name), tool_input)

    def allow(self, reason: str, updated_input: dict[str, Any] | None,
              note: str | None = None) -> dict[str, Any]:
        # Dialects answer no context for the model yet: the edit note stays out.
        return self.dialect.allow(reason, updated_input)

    def deny(self, reason: str) -> dict[str, Any]:
        return self.dialect.deny(reason)

    def acknowledge(self) -> dict[str, Any]:
        return self.dialect.acknowledge()

    def waiting(self, settings: Settings, link: str) -> dict[str, Any]:
        return self.dialect.waiting(link)

    def response_text(self, response: Any) -> str:
        return self.dialect.response_text(response)


def deployment_class(dialect: Dialect, extra: Mapping[str, str], tool_name: str,
                     known: Known) -> tuple[SideEffects, str] | None:
    """The class of an agent's tool, and its source: the settings table (exact
    name, then globs), the dialect's built-ins, an MCP tool parkgate serves."""
    table = f"{dialect.name}_tools"
    if tool_name in extra:
        return SideEffects(extra[tool_name]), table
    for pattern, cls in extra.items():
        if fnmatch.fnmatchcase(tool_name, pattern):
            return SideEffects(cls), f"{table} ({pattern})"
    if tool_name in dialect.tools:
        return SideEffects(dialect.tools[tool_name]), f"{dialect.label}'s built-in tools"
    prefix = dialect.mcp_prefix
    if prefix and tool_name.startswith(prefix) and "__" in tool_name[len(prefix):]:
        served = tool_name[len(prefix):]
        found = known(served)
        if found is not None:
            return found, f"parkgate's MCP tool {served}"
    return None
