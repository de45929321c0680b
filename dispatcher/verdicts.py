"""The classify/execute contract: what classify() decides, what execute() runs.

`classify` returns exactly one of Execute | Deny | NeedsApproval and has no
side effects. `execute` takes a PreparedCall (from an Execute verdict or from
an approved NeedsApproval) and never re-classifies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from parkgate.models import (
    Session,
    SideEffects,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolResultBlock,
    ToolUseBlock,
)


class PreparedCall(BaseModel):
    """A validated, scoped, hook-processed call ready to run."""

    call: ToolUseBlock  # after before-hooks (they may rewrite the input)
    session: Session
    definition: ToolDefinition
    input_hash: str
    #: The policy rule that decided (e.g. "default.READ=auto", "rules[0]").
    rule: str
    parent_tool_use_id: str | None = None
    #: A remembered rule (rule "remembered:<id>") approved it: who made the
    #: rule (name and authenticated principal), for the call row and events.
    remembered_by: str | None = None
    remembered_principal: str | None = None


class ApprovalInfo(BaseModel):
    """What a human needs to decide: shown in prompts, pages and events."""

    request_id: str
    tool_name: str
    tool_use_id: str
    input_summary: str
    side_effects: SideEffects
    rule: str
    input_hash: str
    #: e.g. ["will modify src/auth.ts"]
    projected_impact: list[str] = Field(default_factory=list)
    #: Unified diff for write_file / patch_file (None when not applicable).
    diff: str | None = None
    #: For atomic composed tools: the sub-tools the operation may call.
    sub_tools: list[str] = Field(default_factory=list)
    #: Policy mode that asked for approval: "prompt" or "prompt_once".
    mode: str = "prompt"
    #: Workspace-relative files the call will touch, where known.
    files: list[str] = Field(default_factory=list)
    #: Set when the call is a sub-call of a composed tool.
    parent_tool_use_id: str | None = None
    #: Named approvers who decide (each gets a personal link); empty = any
    #: key with the approver role, or the generic link.
    approvers: list[str] = Field(default_factory=list)
    #: Distinct named approvers who must allow before the call runs.
    quorum: int = 1
    #: The rule lets the submitting key decide its own call.
    self_approval: bool = False
    #: While parked, notify again after this long (None: never).
    remind_after_seconds: int | None = None
    #: Then notify `escalate_to` (approver names) after this long. With named
    #: approvers they are named approvers too (their personal links decide);
    #: the first notice leaves them out.
    escalate_after_seconds: int | None = None
    escalate_to: list[str] = Field(default_factory=list)
    #: The agent's own process runs the tool once released (client tools).
    client_executed: bool = False


class Execute(BaseModel):
    kind: Literal["execute"] = "execute"
    prepared: PreparedCall


class Deny(BaseModel):
    kind: Literal["deny"] = "deny"
    result: ToolResultBlock
    error_class: ToolErrorClass
    rule: str | None = None
    #: "tool.input_invalid" for validation errors, else "tool.failed".
    event_type: Literal["tool.failed", "tool.input_invalid"] = "tool.failed"
    side_effects: SideEffects | None = None


class NeedsApproval(BaseModel):
    kind: Literal["needs_approval"] = "needs_approval"
    prepared: PreparedCall
    info: ApprovalInfo


Verdict = Execute | Deny | NeedsApproval


class RunResult(BaseModel):
    """What running a call gave: the model-facing result, when it started and
    how long it took. The pipeline's `ToolRun` and the execute activity's
    output (`ExecuteOutput`) share it."""

    result: ToolResultBlock
    error_class: ToolErrorClass | None = None
    started_at: datetime | None = None
    duration_ms: float = 0.0


class ToolRun(RunResult):
    """Outcome of execute(): the model-facing result plus the full record."""

    #: The tool's whole output (untruncated) for the history store.
    output: ToolOutput | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
