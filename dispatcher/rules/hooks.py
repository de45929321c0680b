"""Before/after hooks around a tool call.

A before-hook runs inside classify (so it must be side-effect free): it may
let the call through (return None), rewrite it (return a new ToolUseBlock, which
is re-validated and re-scoped) or halt it (return HookHalt). An after-hook runs
at the end of execute and may replace the ToolRun (e.g. to redact output).
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

from parkgate.models import Session, ToolDefinition, ToolErrorClass, ToolUseBlock
from parkgate.verdicts import PreparedCall, ToolRun


class HookHalt(BaseModel):
    """Returned by a before-hook to stop the call; becomes a Deny."""

    message: str
    error_class: ToolErrorClass = ToolErrorClass.PERMISSION_DENIED


class ToolHook:
    """Base class for hooks; override either method (both may be sync or async)."""

    #: Used in the verdict's rule ("hook:<name>"); defaults to the class name.
    name: str = ""

    def before(self, call: ToolUseBlock, session: Session, definition: ToolDefinition) -> Any:
        """Return None, a rewritten ToolUseBlock, or HookHalt."""
        return None

    def after(self, prepared: PreparedCall, run: ToolRun) -> Any:
        """Return None to keep ``run`` or a replacement ToolRun."""
        return None


def hook_name(hook: object) -> str:
    return getattr(hook, "name", "") or type(hook).__name__


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (hooks and callbacks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value
