"""parkgate's dispatcher: classify a tool call, confirm it if policy says so, run it.

The names below are the in-process API (README "Use it in-process"): a
library user imports them from `parkgate`; parkgate's own code imports each
from the module that defines it (the concepts live in `parkgate.rules`,
`.approvals`, `.calls`, `.sandbox`, `.workspaces`, `.client_tools`, `.pipeline`,
`.tools`; docs/ARCHITECTURE.md).

They are imported on first use (PEP 562), not with the package: the workflow
sandbox executes this file again for every new workflow run (it is the parent
package of `parkgate.workflows`), and a command-line call that needs none of
them should not pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parkgate.calls.events import EVENT_TYPES, ToolEvent, make_event_id
    from parkgate.context import SubToolCaller, ToolContext
    from parkgate.errors import (
        ConfirmationTimeout,
        ToolCancelled,
        ToolError,
        ToolExecutionError,
        ToolNameConflictError,
        ToolNotFound,
        ToolPermissionDenied,
        ToolRegistrationError,
        ToolTimeout,
        ToolUserDenied,
        ToolValidationError,
        WorkspaceEscapeError,
    )
    from parkgate.local import ConfirmationDecision, ToolDispatcher
    from parkgate.models import (
        ImageBlock,
        ImageSource,
        Session,
        SideEffects,
        TextBlock,
        ToolDefinition,
        ToolErrorClass,
        ToolOutput,
        ToolResultBlock,
        ToolUseBlock,
        input_hash,
    )
    from parkgate.pipeline import Pipeline, classify, execute
    from parkgate.registry import Tool, ToolFactory, ToolRegistry
    from parkgate.rules.call_caps import Budget, CallBudget
    from parkgate.rules.hooks import HookHalt, ToolHook
    from parkgate.rules.policy import (
        ConfirmationPolicy,
        PolicyDecision,
        PolicyError,
        split_simple_commands,
    )
    from parkgate.tools import builtin_tools, composed_tools
    from parkgate.truncation import Limits
    from parkgate.verdicts import (
        ApprovalInfo,
        Deny,
        Execute,
        NeedsApproval,
        PreparedCall,
        ToolRun,
        Verdict,
    )
    from parkgate.workspaces.diffing import ImpactPreview, unified_diff
    from parkgate.workspaces.files import WorkspaceFileAPI

_EXPORTS: dict[str, str] = {
    "EVENT_TYPES": "parkgate.calls.events",
    "ToolEvent": "parkgate.calls.events",
    "make_event_id": "parkgate.calls.events",
    "SubToolCaller": "parkgate.context",
    "ToolContext": "parkgate.context",
    "ConfirmationTimeout": "parkgate.errors",
    "ToolCancelled": "parkgate.errors",
    "ToolError": "parkgate.errors",
    "ToolExecutionError": "parkgate.errors",
    "ToolNameConflictError": "parkgate.errors",
    "ToolNotFound": "parkgate.errors",
    "ToolPermissionDenied": "parkgate.errors",
    "ToolRegistrationError": "parkgate.errors",
    "ToolTimeout": "parkgate.errors",
    "ToolUserDenied": "parkgate.errors",
    "ToolValidationError": "parkgate.errors",
    "WorkspaceEscapeError": "parkgate.errors",
    "ConfirmationDecision": "parkgate.local",
    "ToolDispatcher": "parkgate.local",
    "ImageBlock": "parkgate.models",
    "ImageSource": "parkgate.models",
    "Session": "parkgate.models",
    "SideEffects": "parkgate.models",
    "TextBlock": "parkgate.models",
    "ToolDefinition": "parkgate.models",
    "ToolErrorClass": "parkgate.models",
    "ToolOutput": "parkgate.models",
    "ToolResultBlock": "parkgate.models",
    "ToolUseBlock": "parkgate.models",
    "input_hash": "parkgate.models",
    "Pipeline": "parkgate.pipeline",
    "classify": "parkgate.pipeline",
    "execute": "parkgate.pipeline",
    "Tool": "parkgate.registry",
    "ToolFactory": "parkgate.registry",
    "ToolRegistry": "parkgate.registry",
    "Budget": "parkgate.rules.call_caps",
    "CallBudget": "parkgate.rules.call_caps",
    "HookHalt": "parkgate.rules.hooks",
    "ToolHook": "parkgate.rules.hooks",
    "ConfirmationPolicy": "parkgate.rules.policy",
    "PolicyDecision": "parkgate.rules.policy",
    "PolicyError": "parkgate.rules.policy",
    "split_simple_commands": "parkgate.rules.policy",
    "builtin_tools": "parkgate.tools",
    "composed_tools": "parkgate.tools",
    "Limits": "parkgate.truncation",
    "ApprovalInfo": "parkgate.verdicts",
    "Deny": "parkgate.verdicts",
    "Execute": "parkgate.verdicts",
    "NeedsApproval": "parkgate.verdicts",
    "PreparedCall": "parkgate.verdicts",
    "ToolRun": "parkgate.verdicts",
    "Verdict": "parkgate.verdicts",
    "ImpactPreview": "parkgate.workspaces.diffing",
    "unified_diff": "parkgate.workspaces.diffing",
    "WorkspaceFileAPI": "parkgate.workspaces.files",
}

__all__ = [
    "EVENT_TYPES",
    "ApprovalInfo",
    "Budget",
    "CallBudget",
    "ConfirmationDecision",
    "ConfirmationPolicy",
    "ConfirmationTimeout",
    "Deny",
    "Execute",
    "HookHalt",
    "ImageBlock",
    "ImageSource",
    "ImpactPreview",
    "Limits",
    "NeedsApproval",
    "Pipeline",
    "PolicyDecision",
    "PolicyError",
    "PreparedCall",
    "Session",
    "SideEffects",
    "SubToolCaller",
    "TextBlock",
    "Tool",
    "ToolCancelled",
    "ToolContext",
    "ToolDefinition",
    "ToolDispatcher",
    "ToolError",
    "ToolErrorClass",
    "ToolEvent",
    "ToolExecutionError",
    "ToolFactory",
    "ToolHook",
    "ToolNameConflictError",
    "ToolNotFound",
    "ToolOutput",
    "ToolPermissionDenied",
    "ToolRegistrationError",
    "ToolRegistry",
    "ToolResultBlock",
    "ToolRun",
    "ToolTimeout",
    "ToolUseBlock",
    "ToolUserDenied",
    "ToolValidationError",
    "Verdict",
    "WorkspaceEscapeError",
    "WorkspaceFileAPI",
    "builtin_tools",
    "classify",
    "composed_tools",
    "execute",
    "input_hash",
    "make_event_id",
    "split_simple_commands",
    "unified_diff",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parkgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
