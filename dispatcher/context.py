"""ToolContext: what a running tool sees about its call and session.

Tools get a workspace-scoped file API, a cancellation event to poll, a logger
scoped to the call and — for composed tools — a ``registry`` handle through
which they call their declared sub-tools.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from parkgate.truncation import Limits
from parkgate.workspaces.files import WorkspaceFileAPI

if TYPE_CHECKING:
    from parkgate.verdicts import ToolRun


class SubToolCaller(Protocol):
    """Lets a composed tool call the sub-tools it declared in ``composed_of``."""

    async def execute(self, name: str, input: dict[str, Any]) -> ToolRun:
        """Validate, scope, (policy-check) and run one sub-call; never raises ToolError."""
        ...


@dataclass
class ToolContext:
    """Session-scoped data for one tool execution."""

    session_id: str
    turn_id: str
    tool_use_id: str
    workspace_path: str
    cancel_event: asyncio.Event
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    workspace_files: WorkspaceFileAPI
    limits: Limits = field(default_factory=Limits)
    #: Set for composed tools (definition.composed_of); None otherwise.
    registry: SubToolCaller | None = None
    parent_tool_use_id: str | None = None
    #: The tool's name and side-effect class ("execute", "network", ...): the
    #: sandbox decides from them whether its processes may reach the network.
    tool_name: str = ""
    side_effects: str = ""


#: The tool call running in the current task (set by the pipeline around execute).
current_call: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "parkgate_current_call", default=None
)
_open_audit_installed = False
_open_log = logging.getLogger("parkgate.tools.open")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open":
        return
    call = current_call.get()
    if call is not None and _open_log.isEnabledFor(logging.DEBUG):
        _open_log.debug(
            "tool %s (%s) opened %r directly", call[0], call[1], args[0] if args else None
        )


def install_open_audit() -> None:
    """Log (DEBUG) files opened while a tool runs, including raw open() calls.

    Raw filesystem access is permitted (sandboxing is a non-goal) but visible
    for debugging. Audit hooks cannot be removed, so this installs once.
    """
    global _open_audit_installed
    if not _open_audit_installed:
        sys.addaudithook(_audit)
        _open_audit_installed = True
