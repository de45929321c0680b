"""parkgate's dispatcher: classify a tool call, confirm it if policy says so, run it.

The names below are the in-process API (README "Use it in-process"): a
library user imports them from `parkgate`; parkgate's own code imports each
from the module that defines it (the concepts live in `parkgate.rules`,
`.approvals`, `.calls`, `.sandbox`, `.workspaces`, `.clients`, `.pipeline`,
`.tools`; docs/ARCHITECTURE.md).
"""

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
from parkgate.rules.budget import Budget, CallBudget
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
