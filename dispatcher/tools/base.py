"""Shared base for built-in tools: definition, no-op cancel, optional hooks.

Besides the Tool protocol, a tool may implement ``check_input(input, limits)``
(extra validation run in classify, e.g. the shell guard) and
``preview(input, files)`` (projected impact and diff shown to approvers).
"""

from __future__ import annotations

from typing import Any

from parkgate.context import ToolContext
from parkgate.errors import ToolCancelled
from parkgate.models import ToolDefinition, ToolOutput
from parkgate.truncation import Limits
from parkgate.workspaces.diffing import ImpactPreview
from parkgate.workspaces.files import WorkspaceFileAPI


class BaseTool:
    """A tool with a class-level definition and a fresh instance per call."""

    definition: ToolDefinition

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        raise NotImplementedError

    async def cancel(self) -> bool:
        """File tools finish once started (spec §7); nothing to abort."""
        return False

    def check_input(self, input: dict[str, Any], limits: Limits) -> list[str]:
        return []

    def preview(self, input: dict[str, Any], files: WorkspaceFileAPI) -> ImpactPreview | None:
        return None

    @staticmethod
    def check_cancelled(context: ToolContext) -> None:
        """Quick tools check the cancel event once before starting."""
        if context.cancel_event.is_set():
            raise ToolCancelled("Cancelled before start")
