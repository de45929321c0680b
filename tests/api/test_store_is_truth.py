"""A call's resource comes from the store; its workflow is asked only for what
the store cannot know yet (api/shared/service.py). Here the workflow is a stand-in
that answers a chosen status view and counts every round trip, so each case
pins both the answer and what it cost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent, WorkflowTaskFailedEventAttributes
from temporalio.client import WorkflowExecutionStatus

from parkgate.api.shared.schemas import CallSummary
from parkgate.api.shared.service import CallService
from parkgate.approvals.decisions import DecisionRecord
from parkgate.approvals.links import sign_token, token_hash
from parkgate.calls.records import ApprovalRecord, CallStatus, CallUpdate
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.payloads import CALL_WORKFLOW, CallOutcome, CallStatusView
from parkgate.models import ToolResultBlock, utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository

SID, TID, RID = "s-truth", "toolu_truth", "req-truth"


class TemporalServer:
    """The server side of the stand-in: a describe (counted) says the workflow
    runs with its task on `attempt`; its history holds `failures`."""

    def __init__(self) -> None:
        self.describes = 0
        self.attempt = 1
        self.failures: list[HistoryEvent] = []

    def get_workflow_handle(self, workflow_id: str, run_id: str | None = None) -> Any:
        server = self

        class Handle:
            async def describe(self) -> Any:
                server.describes += 1
                return SimpleNamespace(
                    status=WorkflowExecutionStatus.RUNNING, run_id="run-1",
                    workflow_type=CALL_WORKFLOW,
                    raw_description=SimpleNamespace(
                        pending_workflow_task=SimpleNamespace(attempt=server.attempt)),
                )

            async def fetch_history_events(self) -> AsyncIterator[HistoryEvent]:
                for event in server.failures:
                    yield event

        return Handle()


class Workflow:
    """A DurableDispatcher stand-in: the status query answers `view`; a describe
    of a call's workflow handle (worker groups only) would fail the test."""

    def __init__(self, view: CallStatusView | None = None) -> None:
        self.view = view
        self.queries = 0
        self.client = TemporalServer()

    async def status(self, session_id: str, tool_use_id: str) -> CallStatusView | None:
        self.queries += 1
        return self.view

    def handle(self, session_id: str, tool_use_id: str) -> Any:
        raise AssertionError("no describe without worker groups")


def service(tmp_path: Path, repo: Repository, workflow: Workflow) -> CallService:
    settings = Settings(data_dir=tmp_path)
    return CallService(settings, repo, cast(DurableDispatcher, workflow))


def view(status: CallStatus, **kw: Any) -> CallStatusView:
    return CallStatusView(workflow_id=f"{SID}/{TID}", session_id=SID, tool_use_id=TID,
                          tool_name="write_file", status=status, **kw)


async def store(repo: Repository, status: CallStatus, **kw: Any) -> None:
    await repo.update_call(CallUpdate(session_id=SID, tool_use_id=TID, turn_id="t1",
                                      tool_name="write_file", status=status, **kw))


async def approval(repo: Repository, secret: str, **info: Any) -> ApprovalRecord:
    expires = utcnow().replace(microsecond=0) + timedelta(hours=1)
    record = ApprovalRecord(
        request_id=RID, session_id=SID, turn_id="t1", tool_use_id=TID,
        tool_name="write_file", token_hash=token_hash(sign_token(secret, RID, expires)),
        input_hash="h", requested_at=utcnow(), expires_at=expires, info=info,
    )
    await repo.save_approval(record)
    return record


async def test_a_running_row_stays_running_while_the_workflow_records_its_outcome(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    """The workflow has its outcome while its final write is in flight: the
    call is not finished until the store has the final row (the old merge
    answered `succeeded` from the query), and no round trip is spent on it."""
    await store(sqlite_repo, CallStatus.RUNNING, rule="writes", side_effects="write")
    done = ToolResultBlock(tool_use_id=TID)
    wf = Workflow(view(CallStatus.SUCCEEDED,
                       outcome=CallOutcome(result=done, status=CallStatus.SUCCEEDED)))
    calls = service(tmp_path, sqlite_repo, wf)

    resource = await calls.resource(SID, TID)
    assert resource is not None
    assert (resource.status, resource.finished, resource.result) == (
        CallStatus.RUNNING, False, None)
    assert (resource.rule, resource.side_effects, resource.turn_id) == ("writes", "write", "t1")
    assert resource.problem is None
    assert wf.queries == 0 and wf.client.describes == 1  # is its task healthy? a describe

    await store(sqlite_repo, CallStatus.SUCCEEDED, result=done, finished_at=utcnow())
    resource = await calls.resource(SID, TID)
    assert resource is not None and resource.finished and resource.result == done
    assert wf.queries == 0


async def test_a_parked_call_is_answered_from_its_row_and_request(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Parked: status, link and expiry from the store, no round trip, also
    when the workflow already holds a decision the store has not written."""
    wf = Workflow(view(CallStatus.RUNNING))
    calls = service(tmp_path, sqlite_repo, wf)
    request = await approval(sqlite_repo, calls.secret)
    await store(sqlite_repo, CallStatus.PARKED, request_id=RID, rule="writes")

    resource = await calls.resource(SID, TID, turn_id="t1")
    assert resource is not None and resource.status == CallStatus.PARKED
    assert resource.approval_url is not None and resource.links.approval == resource.approval_url
    assert resource.approval_url.startswith(calls.settings.public_base_url)
    assert resource.expires_at == request.expires_at and resource.request_id == RID
    assert resource.votes is None and resource.approvers is None
    assert wf.queries == 0


async def test_a_quorum_call_asks_only_for_votes_and_never_ends_before_the_store(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Quorum votes live in the workflow. A deny the workflow accepted but the
    store has not written leaves the call parked, not finished (the old merge
    answered `denied`, finished, with no final row)."""
    deny = DecisionRecord(request_id=RID, decision="deny", decided_by="alice",
                          decided_at=utcnow(), votes=["carol"])
    wf = Workflow(view(CallStatus.DENIED, decision=deny, votes=["carol"]))
    calls = service(tmp_path, sqlite_repo, wf)
    await approval(sqlite_repo, calls.secret, approvers=["alice", "bob", "carol"], quorum=2)
    await store(sqlite_repo, CallStatus.PARKED, request_id=RID)

    resource = await calls.resource(SID, TID)
    assert resource is not None
    assert (resource.status, resource.finished) == (CallStatus.PARKED, False)
    assert (resource.approvers, resource.quorum, resource.votes) == (
        ["alice", "bob", "carol"], 2, ["carol"])
    assert resource.decision is None
    assert wf.queries == 1


async def test_no_row_asks_the_workflow_and_no_workflow_is_no_call(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    wf = Workflow(view(CallStatus.QUEUED))
    calls = service(tmp_path, sqlite_repo, wf)

    async def no_problem(session_id: str, tool_use_id: str) -> None:
        return None

    calls._task_problem = no_problem  # type: ignore[method-assign]
    resource = await calls.resource(SID, TID, turn_id="t1")
    assert resource is not None and resource.status == CallStatus.QUEUED
    assert resource.tool_name == "write_file" and not resource.finished
    wf.view = None
    assert await calls.resource(SID, TID) is None


async def test_the_audit_summary_shows_the_same_row(sqlite_repo: Repository) -> None:
    await store(sqlite_repo, CallStatus.DENIED, rule="r", decision="deny", decided_by="bob")
    row = await sqlite_repo.get_call(SID, TID)
    assert row is not None
    summary = CallSummary.from_row(row)
    assert summary == CallSummary.model_validate(row.model_dump())
    assert (summary.status, summary.rule, summary.decided_by) == (CallStatus.DENIED, "r", "bob")


async def test_a_running_call_whose_workflow_task_keeps_failing_says_so(
    sqlite_repo: Repository, tmp_path: Path
) -> None:
    """The row says running, but the workflow cannot take the activity's
    result (its task fails on every attempt): the resource says why, instead
    of `running` forever; finished calls never ask."""
    await store(sqlite_repo, CallStatus.RUNNING, rule="writes")
    wf = Workflow()
    wf.client.attempt = 4
    wf.client.failures = [HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
        workflow_task_failed_event_attributes=WorkflowTaskFailedEventAttributes(
            cause=WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR,
            failure=Failure(message="nondeterminism: activity type mismatch"),
        ),
    )]
    calls = service(tmp_path, sqlite_repo, wf)
    resource = await calls.resource(SID, TID)
    assert resource is not None and resource.status == CallStatus.RUNNING
    assert resource.problem is not None and "3 failed attempt" in resource.problem, resource.problem
    assert wf.queries == 0

    await store(sqlite_repo, CallStatus.SUCCEEDED, result=ToolResultBlock(tool_use_id=TID),
                finished_at=utcnow())
    before = wf.client.describes
    resource = await calls.resource(SID, TID)
    assert resource is not None and resource.finished and resource.problem is None
    assert wf.client.describes == before
