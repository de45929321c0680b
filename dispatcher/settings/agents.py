"""Part of Settings: the coding agents behind the gate through their hook
dialects (parkgate.dialects; Claude Code's own settings are in model.py).

Per agent, named `<agent>_<setting>` so each has one obvious environment
variable (PARKGATE_CODEX_WAIT_SECONDS): how long its pre-tool hook holds a
parked call before answering "waiting for a human approval ... call again"
(the installed hook's timeout sits above it), and tool name (or glob) ->
side-effect class over the agent's built-in table. Where a call reaches
outside its workspace, `claude_code_outside_workspace` decides for every agent.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ToolClass = Literal["none", "read", "write", "execute", "network"]


class AgentSettings(BaseModel):
    """The agents' hook settings (a base of Settings)."""

    codex_wait_seconds: float = Field(default=50.0, ge=0, le=3000)
    codex_tools: dict[str, ToolClass] = Field(default_factory=dict)
    gemini_wait_seconds: float = Field(default=50.0, ge=0, le=3000)
    gemini_tools: dict[str, ToolClass] = Field(default_factory=dict)
    opencode_wait_seconds: float = Field(default=50.0, ge=0, le=3000)
    opencode_tools: dict[str, ToolClass] = Field(default_factory=dict)


def wait_seconds(settings: object, agent: str) -> float:
    """How long `agent`'s pre-tool hook holds a parked call."""
    return float(getattr(settings, f"{agent}_wait_seconds"))


def tool_classes(settings: object, agent: str) -> dict[str, str]:
    """`agent`'s tool table from the settings (name or glob -> class)."""
    return dict(getattr(settings, f"{agent}_tools"))
