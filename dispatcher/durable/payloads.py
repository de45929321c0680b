"""Payloads of the durable path: workflow, activity, update, signal and query models.

They live in `dispatcher` (not `workflows/`) because the client, the activities
and the workflows all speak them. Nothing here does I/O, so the workflow
sandbox passes this module through. Field names are part of Temporal history:
add fields with defaults, never rename or remove one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from parkgate.approvals.decisions import (
    DecisionRecord,
    Rejection,
    RejectReason,
)
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import (
    ApprovalRecord,
    CallEnd,
    CallFacts,
    CallRef,
    CallStatus,
    CallUpdate,
    RecordedFinish,
)
from parkgate.calls.rows import opening_columns, opening_of
from parkgate.durable.client_payloads import ClaimInput, ReleaseView
from parkgate.models import (
    Session,
    ToolDefinition,
    ToolErrorClass,
    ToolResultBlock,
    ToolUseBlock,
)
from parkgate.rules.remember_spec import RememberSpec
from parkgate.verdicts import (
    ApprovalInfo,
    Deny,
    Execute,
    NeedsApproval,
    PreparedCall,
    RunResult,
    ToolRun,
)

#: Stable names: they are written into Temporal history.
CALL_WORKFLOW = "parkgate.ToolCall"
TURN_WORKFLOW = "parkgate.Turn"
#: The durable wait for a human on one sub-call of a composed tool (a child
#: of the composed call's workflow, with the sub-call's own call id).
SUBCALL_WORKFLOW = "parkgate.SubCallApproval"
ACT_CLASSIFY = "parkgate.classify"
ACT_RECORD = "parkgate.record"
#: The same write as ACT_RECORD as a regular activity: scheduled only when the
#: workflow task that decided it is committed (decision-dependent writes).
ACT_RECORD_COMMITTED = "parkgate.record_committed"
ACT_CREATE_APPROVAL = "parkgate.create_approval"
ACT_NOTIFY = "parkgate.notify"
#: Slack: post the interactive message of a parked call, and show its outcome.
ACT_SLACK_POST = "parkgate.slack_post"
ACT_SLACK_OUTCOME = "parkgate.slack_outcome"
SLACK_OUTCOME_WORKFLOW = "parkgate.SlackOutcome"
ACT_REVALIDATE = "parkgate.revalidate"
ACT_EXECUTE = "parkgate.execute"
ACT_EXECUTE_LOCAL = "parkgate.execute_local"
UPDATE_DECIDE = "decide"
SIGNAL_DECIDE = "decide"
QUERY_STATUS = "status"

#: The exact text a call ends with when its worker died mid-execution.
WORKER_LOST_TEXT = "worker lost during execution; outcome unknown"


def call_workflow_id(session_id: str, tool_use_id: str) -> str:
    """The one workflow id of a call; resubmitting it attaches, never re-runs."""
    return f"call/{session_id}/{tool_use_id}"


def session_call_prefix(session_id: str) -> str:
    """Prefix shared by every call workflow of a session (for cancel_session_tools)."""
    return f"call/{session_id}/"


def turn_workflow_id(session_id: str, turn_key: str) -> str:
    """Workflow id of one batch (assistant message) of calls."""
    return f"turn/{session_id}/{turn_key}"


# ---------------------------------------------------------------------------
# Workflow input/output
# ---------------------------------------------------------------------------


class CallInput(BaseModel):
    """Start a ToolCallWorkflow: one tool_use block in one session."""

    call: ToolUseBlock
    session: Session
    #: The session's declaration of the called tool when its client runs it
    #: (`client_tools`): the call is released to the client, not executed here.
    client_tool: ToolDefinition | None = None
    #: The submitting client's claim, taken with the release when policy
    #: releases the call at once (no human): one store write for both, no
    #: claim update. Proven like a claim update (kind `claim-at-release`);
    #: a call that parks ignores it (its client claims after the decision).
    claim: ClaimInput | None = None


class CallOutcome(CallEnd):
    """How a call ended (`CallEnd`: what the model gets, the status for
    humans), plus the request and decision that led there."""

    request_id: str | None = None
    decision: DecisionRecord | None = None
    duration_ms: float = 0.0


class TurnInput(BaseModel):
    """Start a TurnWorkflow: one assistant message's tool_use blocks."""

    calls: list[ToolUseBlock]
    session: Session
    #: The session's cap on calls running at once (spec default 4).
    concurrency: int = Field(default=4, ge=1, le=64)
    #: The session's client tools among the calls (see CallInput.client_tool).
    client_tools: list[ToolDefinition] = Field(default_factory=list)


class TurnOutcome(BaseModel):
    """Outcomes in the order of TurnInput.calls."""

    outcomes: list[CallOutcome]

    @property
    def results(self) -> list[ToolResultBlock]:
        return [o.result for o in self.outcomes]


# ---------------------------------------------------------------------------
# Update / signal / query
# ---------------------------------------------------------------------------


class DecideResult(BaseModel):
    """What a decider learns: whether it won, and the decision that stands."""

    accepted: bool
    winner: DecisionRecord | None = None
    message: str = ""
    #: Why a decision was refused (accepted=False); None when accepted, or
    #: from a worker that predates typed reasons.
    reason: RejectReason | None = None

    @classmethod
    def refused(cls, rejection: Rejection, winner: DecisionRecord | None = None) -> DecideResult:
        """A refused decision, as every decider learns it."""
        return cls(accepted=False, winner=winner, message=rejection.message,
                   reason=rejection.reason)
    #: Quorum requests: approvers who have allowed so far, and how many must.
    votes: list[str] = Field(default_factory=list)
    quorum: int = 1


class StatusRequest(BaseModel):
    """Query `status` argument (reserved for future filters)."""


class CallStatusView(BaseModel):
    """Query `status`: where a call is now."""

    workflow_id: str
    session_id: str
    tool_use_id: str
    tool_name: str
    status: CallStatus
    request: ApprovalInfo | None = None
    approval_url: str | None = None
    requested_at: datetime | None = None
    expires_at: datetime | None = None
    decision: DecisionRecord | None = None
    outcome: CallOutcome | None = None
    #: Quorum requests: the named approvers who have allowed so far.
    votes: list[str] = Field(default_factory=list)
    #: The session's worker group (its calls classify and run only there).
    worker_group: str | None = None
    #: A released client-executed call: its input, hash and claim.
    release: ReleaseView | None = None


# ---------------------------------------------------------------------------
# Activities
# ---------------------------------------------------------------------------


class ExecPlan(BaseModel):
    """How to run a classified call; computed by classify from settings so the
    workflow (which may not read settings) gets every knob through history."""

    local: bool
    start_to_close_seconds: float
    heartbeat_timeout_seconds: float
    #: Approval expiry; None = never.
    expiry_seconds: float | None
    #: A released client call ends `unclaimed` after this (settings.
    #: client_unclaimed_seconds); None in histories from before: they wait on.
    unclaimed_seconds: float | None = None


class ClassifyInput(BaseModel):
    call: ToolUseBlock
    session: Session
    #: Only in older histories: a whole call row; means the same as `ref`.
    run_row: CallUpdate | None = None
    #: When set, an auto-approved local (NONE/READ) call runs right away in the
    #: same activity, which records it as this call of this workflow run.
    ref: CallRef | None = None
    #: CallInput.client_tool: classified against it, never run here.
    client_tool: ToolDefinition | None = None
    #: CallInput.claim: its proof is checked here (ClassifyOutput.claim_checked),
    #: so the verdict is in history and no replay reads the worker's keys.
    claim: ClaimInput | None = None


VerdictModel = Annotated[Execute | Deny | NeedsApproval, Field(discriminator="kind")]


class ClassifyOutput(BaseModel):
    verdict: VerdictModel
    plan: ExecPlan
    #: The run of an auto-approved local call (ClassifyInput.run_row).
    executed: ExecuteOutput | None = None
    #: ClassifyInput.claim's proof was checked here (False in histories from
    #: before: the workflow checks it itself, with the keys they ran under).
    claim_checked: bool = False
    #: Why ClassifyInput.claim is not proven (None: proven, or no claim).
    claim_problem: str | None = None


def prepared_fields(prepared: PreparedCall) -> dict[str, Any]:
    """The call-row fields classification decides (older histories' `run_row`):
    the same mapping the activities use for new payloads (parkgate.calls.rows)."""
    return opening_columns(opening_of(prepared))


def with_prepared(row: CallUpdate, prepared: PreparedCall) -> CallUpdate:
    """The call row with what classification decided."""
    return row.model_copy(update=prepared_fields(prepared))


class RecordInput(BaseModel):
    """Events, call facts and an approval to write, idempotently."""

    events: list[ToolEvent] = Field(default_factory=list)
    #: Only in older histories: a call-row change as the workflow built it.
    update: CallUpdate | None = None
    #: What the workflow knows of the call (ids, status, outcome); the activity
    #: turns it, with `approval`'s decision, into the row (parkgate.calls.rows).
    facts: CallFacts | None = None
    approval: ApprovalRecord | None = None
    #: `approval` carries only the decision (no request `info`): store it with a
    #: first-write-wins decision update, leaving the stored request as it is.
    #: Keeps decision payloads small (they are in history as activity inputs).
    approval_decision_only: bool = False
    #: An outcome the workflow could not observe (its execute activity was lost):
    #: when the call's final event is already stored, the activity did finish and
    #: recorded it; keep that record and report it back instead of contradicting it.
    unless_finished: bool = False
    #: The decision asked to be remembered: written as a rule with the approval.
    remember: RememberSpec | None = None


class RecordOutput(BaseModel):
    events: int
    #: Set (with unless_finished) when the call had already finished in the store.
    finished: RecordedFinish | None = None


class ApprovalRequest(BaseModel):
    """create_approval input: everything to store and sign one approval request."""

    info: ApprovalInfo
    session: Session
    call: ToolUseBlock
    requested_at: datetime
    expires_at: datetime | None
    workflow_id: str
    run_id: str
    #: Only in older histories: the call row as parked.
    update: CallUpdate | None = None
    #: The call: its row, parked, is written with tool.confirmation_requested
    #: (`call` is the call as classified: its input is what the row shows).
    ref: CallRef | None = None


class ApprovalCreated(BaseModel):
    """create_approval output."""

    approval: ApprovalRecord
    #: Never set any more (links are derived when read, so no token reaches
    #: Temporal history); kept optional so older histories still decode.
    approval_url: str | None = None
    #: True when parkgate.notify has someone to tell (webhooks, approvers by e-mail).
    notify: bool = False
    #: True when a Slack app is configured: the workflow starts parkgate.slack_post
    #: and, when the call ends, updates that message with the outcome.
    slack: bool = False


class NotifyInput(BaseModel):
    """parkgate.notify input: what a webhook announces for a parked call."""

    info: ApprovalInfo
    session: Session
    #: Only in older histories: the notify activity derives the link itself.
    approval_url: str | None = None
    requested_at: datetime
    expires_at: datetime | None = None
    #: "request" (the call parked), "reminder" (still waiting, same people) or
    #: "escalation" (the rule's escalate_to people).
    kind: Literal["request", "reminder", "escalation"] = "request"


class NotifyOutput(BaseModel):
    delivered: int = 0
    failed: int = 0


class SlackMessageRef(BaseModel):
    """Where a call's Slack message is (not secret: a channel id and a timestamp)."""

    channel: str
    ts: str


class SlackOutcomeInput(BaseModel):
    """What the ended call's Slack message should say (parkgate.SlackOutcome)."""

    message: SlackMessageRef
    info: ApprovalInfo
    session_id: str
    status: str
    decision: DecisionRecord | None = None


class RevalidateInput(BaseModel):
    prepared: PreparedCall
    new_input: dict[str, Any]


class RevalidateOutput(BaseModel):
    """Either the re-scoped call or why the edit is not acceptable."""

    prepared: PreparedCall | None = None
    error: str | None = None
    error_class: ToolErrorClass | None = None


class SubCallStep(BaseModel):
    """A sub-call that returned before its composed call parked: a resumed run
    of the composed tool gets this result back instead of running it again."""

    tool_use_id: str
    #: Tool and input it was run with (parkgate.pipeline.subcall_runner.step_hash).
    step_hash: str
    run: ToolRun


class SubCallDecided(BaseModel):
    """How a parked sub-call's request ended (the SubCallApproval workflow's result)."""

    request_id: str
    #: allow | deny | expired | cancelled
    decision: str
    reason: str | None = None
    #: The input the decision was about: the resumed run runs only this one.
    input_hash: str


class SubCallPark(BaseModel):
    """ExecuteOutput.parked: the composed tool stopped at a sub-call that needs a
    human; nothing of it is running. The workflow waits (SubCallApproval), then
    runs the tool again with `steps` and the decision (ExecuteInput)."""

    sub: NeedsApproval
    #: The request's expiry (parkgate.activities.plan.approval_expiry); None = never.
    expiry_seconds: float | None = None
    steps: list[SubCallStep] = Field(default_factory=list)
    #: Events the store could not take before the park (the workflow records them).
    pending_events: list[ToolEvent] = Field(default_factory=list)


class SubCallApprovalInput(BaseModel):
    """The SubCallApproval workflow's input: the request to park and how long."""

    sub: NeedsApproval
    expiry_seconds: float | None = None


class ExecuteInput(BaseModel):
    prepared: PreparedCall
    #: The hash a human approved (or the classified hash for auto calls).
    approved_hash: str
    workflow_id: str = ""
    #: Only in older histories: whole call rows (the queued row of an auto
    #: call, and the final row's fixed fields); `ref` says the same.
    initial: CallUpdate | None = None
    final: CallUpdate | None = None
    #: The call: the activity writes its row with tool.called (an auto call's
    #: whole row; a decided call's just `running`) and its final row with the
    #: final event, in one transaction: the workflow needs no record step.
    ref: CallRef | None = None
    #: The approval request that led here (decided calls).
    request_id: str | None = None
    #: The human decision that lets this call run (tool.confirmation_resolved,
    #: the decided approval row and call row): written by the activity before
    #: the tool starts. It travels here, not through a local activity, because
    #: the activity is scheduled only once the accepting workflow task commits.
    resolved: RecordInput | None = None
    #: A non-atomic composed tool's sub-call that needs a human stops the run
    #: (ExecuteOutput.parked) instead of being refused: set by workflows that
    #: wait for such decisions themselves.
    park_sub_calls: bool = False
    #: A resumed run: the sub-calls that returned before the park (replayed,
    #: not run again) and the decision on the one it parked at.
    steps: list[SubCallStep] = Field(default_factory=list)
    sub_decided: SubCallDecided | None = None
    #: The call ran with approver-edited input: what changed
    #: (parkgate.approvals.edits), put before the tool's output for the model.
    edit_note: str | None = None


class ExecuteOutput(RunResult):
    """The run's result (`RunResult`); the full output went straight to the store.

    When the store was unreachable during execution, the events it could not
    take (and a small full output) travel back here so the workflow records
    them with the record activity, which retries until the store is back.
    """

    #: False when ExecuteInput.resolved could not be stored (it is among
    #: pending_events; the workflow writes it, with the approval row, itself).
    resolved_recorded: bool = True
    pending_events: list[ToolEvent] = Field(default_factory=list)
    full_output: dict[str, Any] | None = None
    #: True when the final row and every event are stored (see ExecuteInput.ref).
    recorded: bool = False
    #: Set when the composed tool stopped at a sub-call that needs a human (the
    #: run's result fields are then placeholders: the call is not over).
    parked: SubCallPark | None = None

ClassifyOutput.model_rebuild()
