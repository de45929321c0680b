"""parkgate's dispatcher: classify a tool call, confirm it if policy says so, run it."""

from dispatcher.budget import Budget, CallBudget
from dispatcher.context import SubToolCaller, ToolContext
from dispatcher.diffing import ImpactPreview, unified_diff
from dispatcher.errors import (
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
from dispatcher.events import EVENT_TYPES, ToolEvent, make_event_id
from dispatcher.hooks import HookHalt, ToolHook
from dispatcher.local import ConfirmationDecision, ToolDispatcher
from dispatcher.models import (
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
from dispatcher.pipeline import Pipeline, classify, execute
from dispatcher.policy import ConfirmationPolicy, PolicyDecision, PolicyError, split_simple_commands
from dispatcher.registry import Tool, ToolFactory, ToolRegistry
from dispatcher.tools import builtin_tools, composed_tools
from dispatcher.truncation import Limits
from dispatcher.verdicts import (
    ApprovalInfo,
    Deny,
    Execute,
    NeedsApproval,
    PreparedCall,
    ToolRun,
    Verdict,
)
from dispatcher.workspace import WorkspaceFileAPI

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
