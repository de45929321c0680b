"""Typed activity signatures the workflows call (`workflow.execute_activity(classify, ...)`).

Workflows may not import parkgate.activities (their implementations do I/O),
so each activity is declared here once: its stable type name (the ACT_*
constants: they are in every history, never rename them), its input and its
result. The implementations in parkgate.activities register under the same
names with the same signatures; tests/workflows/test_activity_defs.py checks
that they match. Calling a stub schedules the activity by name, exactly as a
string name with `result_type` did, so histories replay unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from temporalio import activity

from parkgate.durable.client_payloads import (
    ACT_CLIENT_OUTCOME,
    ClientOutcomeRecord,
    ClientOutcomeRecorded,
)
from parkgate.durable.payloads import (
    ACT_CLASSIFY,
    ACT_CREATE_APPROVAL,
    ACT_EXECUTE,
    ACT_EXECUTE_LOCAL,
    ACT_NOTIFY,
    ACT_RECORD,
    ACT_RECORD_COMMITTED,
    ACT_REVALIDATE,
    ACT_SLACK_OUTCOME,
    ACT_SLACK_POST,
    ApprovalCreated,
    ApprovalRequest,
    ClassifyInput,
    ClassifyOutput,
    ExecuteInput,
    ExecuteOutput,
    NotifyInput,
    NotifyOutput,
    RecordInput,
    RecordOutput,
    RevalidateInput,
    RevalidateOutput,
    SlackMessageRef,
    SlackOutcomeInput,
)


def _stub(name: str) -> NoReturn:
    raise NotImplementedError(f"{name} is a signature; parkgate.activities implements it")


@activity.defn(name=ACT_CLASSIFY)
async def classify(inp: ClassifyInput) -> ClassifyOutput:
    """Validate, scope and decide auto-run or park."""
    _stub(ACT_CLASSIFY)


@activity.defn(name=ACT_REVALIDATE)
async def revalidate(inp: RevalidateInput) -> RevalidateOutput:
    """Re-validate and re-scope an approver's edited input."""
    _stub(ACT_REVALIDATE)


@activity.defn(name=ACT_RECORD)
async def record(inp: RecordInput) -> RecordOutput:
    """Write the call's events and row (local activity)."""
    _stub(ACT_RECORD)


@activity.defn(name=ACT_RECORD_COMMITTED)
async def record_committed(inp: RecordInput) -> RecordOutput:
    """The same write as `record`, only once the deciding task is committed."""
    _stub(ACT_RECORD_COMMITTED)


@activity.defn(name=ACT_CREATE_APPROVAL)
async def create_approval(req: ApprovalRequest) -> ApprovalCreated:
    """Sign the approval link and store the request."""
    _stub(ACT_CREATE_APPROVAL)


@activity.defn(name=ACT_EXECUTE)
async def execute(inp: ExecuteInput) -> ExecuteOutput:
    """Run the tool (heartbeating, at most once)."""
    _stub(ACT_EXECUTE)


@activity.defn(name=ACT_EXECUTE_LOCAL)
async def execute_local(inp: ExecuteInput) -> ExecuteOutput:
    """Run a short side-effect-free tool."""
    _stub(ACT_EXECUTE_LOCAL)


@activity.defn(name=ACT_NOTIFY)
async def notify(req: NotifyInput) -> NotifyOutput:
    """Post the approval webhooks."""
    _stub(ACT_NOTIFY)


@activity.defn(name=ACT_SLACK_POST)
async def slack_post(req: NotifyInput) -> SlackMessageRef:
    """Post the approval message to Slack."""
    _stub(ACT_SLACK_POST)


@activity.defn(name=ACT_SLACK_OUTCOME)
async def slack_outcome(req: SlackOutcomeInput) -> None:
    """Update the Slack message with the call's outcome."""
    _stub(ACT_SLACK_OUTCOME)


@activity.defn(name=ACT_CLIENT_OUTCOME)
async def client_outcome(inp: ClientOutcomeRecord) -> ClientOutcomeRecorded:
    """Store what a client reported of its run (truncated for the model, whole
    in the store), with its events and, unless late, the final row."""
    _stub(ACT_CLIENT_OUTCOME)


#: Every declared activity (the worker registers an implementation of each).
ALL: tuple[Callable[..., Any], ...] = (
    classify,
    revalidate,
    record,
    record_committed,
    create_approval,
    execute,
    execute_local,
    notify,
    slack_post,
    slack_outcome,
    client_outcome,
)
