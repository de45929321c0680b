"""The store side builds call rows from ids and facts (parkgate.calls.rows).

Workflow payloads carry a `CallRef` and facts, never a row; payloads from
older histories (whole rows in `run_row`, `initial`/`final`, `update`) must
still be written exactly as before while parked calls drain. Each test writes
one call the old way and its twin the new way, and compares the stored rows.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from parkgate.activities.classify import ClassifyActivities
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.record import RecordActivities
from parkgate.calls.records import (
    ApprovalRecord,
    CallEnd,
    CallFacts,
    CallOpening,
    CallRef,
    CallStatus,
    CallUpdate,
)
from parkgate.calls.rows import opening_of, row_for
from parkgate.durable.payloads import (
    ApprovalRequest,
    ClassifyInput,
    ExecuteInput,
    RecordInput,
    prepared_fields,
)
from parkgate.models import Session, TextBlock, ToolErrorClass, ToolResultBlock, ToolUseBlock
from parkgate.verdicts import Execute, NeedsApproval
from tests.activities.test_activities import deps_for
from tests.fixtures.temporal import AUTO_ALL

#: Columns that differ between two calls by construction (ids, clocks).
_VARYING = {"id", "tool_use_id", "workflow_id", "created_at", "updated_at", "started_at",
            "finished_at", "duration_ms", "result", "full_output", "request_id"}


def ref_for(session: Session, call_id: str, name: str) -> CallRef:
    return CallRef(session_id=session.session_id, tool_use_id=call_id, turn_id=session.turn_id,
                   tool_name=name, workflow_id=f"call/{session.session_id}/{call_id}",
                   run_id="r", created_at=datetime(2026, 1, 1, tzinfo=UTC))


def old_row(ref: CallRef, **fields: Any) -> CallUpdate:
    """A row as a workflow of the previous release built it (base + fields)."""
    return CallUpdate.model_validate({**ref.model_dump(), **fields})


async def same_rows(repo: Any, session: Session, old_id: str, new_id: str) -> dict[str, Any]:
    old = await repo.get_call(session.session_id, old_id)
    new = await repo.get_call(session.session_id, new_id)
    assert old is not None and new is not None
    a = old.model_dump(exclude=_VARYING)
    b = new.model_dump(exclude=_VARYING)
    assert a == b
    return b


async def test_auto_read_in_classify_records_the_same_row_from_a_ref(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    workspace = deps.settings.workspace_roots[0]
    (workspace / "r.txt").write_text("hello")
    session = Session(session_id="s-cr", turn_id="t", workspace_path=str(workspace))
    activities = ClassifyActivities(deps)
    for call_id, old in (("old", True), ("new", False)):
        call = ToolUseBlock(id=call_id, name="read_file", input={"path": "./r.txt"})
        ref = ref_for(session, call_id, call.name)
        inp = (ClassifyInput(call=call, session=session,
                             run_row=old_row(ref, status=CallStatus.QUEUED, verdict="execute"))
               if old else ClassifyInput(call=call, session=session, ref=ref))
        out = await activities.classify(inp)  # outside an activity: no time limit
        assert out.executed is not None and out.executed.recorded
    row = await same_rows(sqlite_repo, session, "old", "new")
    assert row["status"] == "succeeded" and row["verdict"] == "execute"
    assert row["input"] == {"path": "./r.txt"} and row["input_hash"] and row["rule"]
    new = await sqlite_repo.get_call(session.session_id, "new")
    assert new.workflow_id == "call/s-cr/new" and new.created_at == datetime(2026, 1, 1, tzinfo=UTC)


async def test_auto_write_records_opening_running_and_final_row_from_a_ref(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    deps = deps_for(sqlite_repo, tmp_path, tool_confirmation=AUTO_ALL)
    session = Session(session_id="s-cw2", turn_id="t",
                      workspace_path=str(deps.settings.workspace_roots[0]))
    runner = ExecuteActivities(deps)
    env = ActivityEnvironment()
    for call_id, old in (("old", True), ("new", False)):
        call = ToolUseBlock(id=call_id, name="write_file",
                            input={"path": "w.txt", "content": "x"})
        verdict = await deps.pipeline.classify(call, session)
        assert isinstance(verdict, Execute)
        prepared = verdict.prepared
        ref = ref_for(session, call_id, call.name)
        if old:
            base = old_row(ref, verdict="execute", **prepared_fields(prepared))
            inp = ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash,
                               initial=base.model_copy(update={"status": CallStatus.QUEUED}),
                               final=base)
        else:
            inp = ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash, ref=ref)
        out = await env.run(runner.execute, inp)
        assert out.recorded and out.error_class is None
    row = await same_rows(sqlite_repo, session, "old", "new")
    assert row["status"] == "succeeded" and row["side_effects"] == "write"
    assert row["rule"] and row["input_hash"]


async def test_parked_row_from_a_ref_matches_the_old_row(sqlite_repo: Any, tmp_path: Path) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    session = Session(session_id="s-cp", turn_id="t",
                      workspace_path=str(deps.settings.workspace_roots[0]))
    acts = RecordActivities(sqlite_repo, deps.settings)
    env = ActivityEnvironment()
    now = datetime.now(UTC)
    for call_id, old in (("old", True), ("new", False)):
        call = ToolUseBlock(id=call_id, name="write_file", input={"path": "a", "content": "b"})
        verdict = await deps.pipeline.classify(call, session)
        assert isinstance(verdict, NeedsApproval)
        ref = ref_for(session, call_id, call.name)
        parked = old_row(ref, status=CallStatus.PARKED, verdict="needs_approval",
                         request_id=verdict.info.request_id, **prepared_fields(verdict.prepared))
        req = ApprovalRequest(
            info=verdict.info, session=session, call=verdict.prepared.call, requested_at=now,
            expires_at=now + timedelta(hours=1), workflow_id=ref.workflow_id or "", run_id="r",
            **({"update": parked} if old else {"ref": ref}),
        )
        await env.run(acts.create_approval, req)
    row = await same_rows(sqlite_repo, session, "old", "new")
    assert row["status"] == "parked" and row["verdict"] == "needs_approval"


def test_a_resolution_and_outcome_become_the_rows_the_old_updates_were() -> None:
    """row_for: the decision's columns come from the approval written with it;
    an edit states the input that runs; an outcome its status and result."""
    ref = CallRef(session_id="s", tool_use_id="tu", turn_id="t", tool_name="write_file",
                  workflow_id="call/s/tu", run_id="r")
    approval = ApprovalRecord(
        request_id="req", session_id="s", turn_id="t", tool_use_id="tu", tool_name="write_file",
        token_hash="h", input_hash="old", requested_at=datetime(2026, 1, 1, tzinfo=UTC),
        decision="allow_with_edits", decided_by="ana", via="link", reason="fix path",
        principal_id="approver:ana", self_approved=None, votes=["ana"],
    )
    edited = {"path": "b.txt", "content": "x"}
    row = row_for(CallFacts(ref=ref, status=CallStatus.RUNNING, request_id="req",
                            input=edited, input_hash="new"), approval)
    assert row == CallUpdate(
        session_id="s", tool_use_id="tu", turn_id="t", tool_name="write_file",
        workflow_id="call/s/tu", run_id="r", status=CallStatus.RUNNING, request_id="req",
        decision="allow_with_edits", decided_by="ana", via="link", reason="fix path",
        principal_id="approver:ana", input=edited, input_hash="new",
    )
    result = ToolResultBlock(tool_use_id="tu", content=[TextBlock(text="no")], is_error=True,
                             error_class=ToolErrorClass.USER_DENIED)
    denied = row_for(CallFacts(
        ref=ref, status=CallStatus.DENIED,
        opening=CallOpening(call=ToolUseBlock(id="tu", name="write_file", input=edited),
                            verdict="deny", rule="rules[0]"),
        end=CallEnd(result=result, status=CallStatus.DENIED,
                    error_class=ToolErrorClass.USER_DENIED, duration_ms=0.0),
    ))
    assert (denied.status, denied.verdict, denied.rule, denied.input, denied.result) == (
        CallStatus.DENIED, "deny", "rules[0]", edited, result)
    assert denied.duration_ms is None  # a call that never ran has no duration
    assert denied.decision is None  # no approval, no decision columns


async def test_a_record_from_an_older_history_writes_its_row_as_before(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    """RecordInput.update (older histories) and RecordInput.facts store the same row."""
    deps = deps_for(sqlite_repo, tmp_path)
    session = Session(session_id="s-rr", turn_id="t",
                      workspace_path=str(deps.settings.workspace_roots[0]))
    acts = RecordActivities(sqlite_repo, deps.settings)
    env = ActivityEnvironment()
    for call_id, old in (("old", True), ("new", False)):
        call = ToolUseBlock(id=call_id, name="write_file", input={"path": "a", "content": "b"})
        ref = ref_for(session, call_id, call.name)
        result = ToolResultBlock(tool_use_id=call_id, content=[TextBlock(text="denied")],
                                 is_error=True, error_class=ToolErrorClass.PERMISSION_DENIED)
        end = CallEnd(result=result, status=CallStatus.DENIED,
                      error_class=ToolErrorClass.PERMISSION_DENIED)
        if old:
            inp = RecordInput(update=old_row(
                ref, status=CallStatus.DENIED, verdict="deny", rule="rules[1]",
                tool_name=call.name, input=call.input, error_class=end.error_class,
                result=result, finished_at=datetime.now(UTC)))
        else:
            opening = CallOpening(call=call, verdict="deny", rule="rules[1]")
            inp = RecordInput(facts=CallFacts(ref=ref, status=CallStatus.DENIED, opening=opening,
                                              end=end, finished_at=datetime.now(UTC)))
        await env.run(acts.record, inp)
    row = await same_rows(sqlite_repo, session, "old", "new")
    assert row["status"] == "denied" and row["verdict"] == "deny" and row["rule"] == "rules[1]"


def test_an_opening_names_the_maker_of_a_remembered_rule(tmp_path: Path) -> None:
    """A call a remembered rule approved shows who made the rule, from the prepared call."""
    from parkgate.calls.rows import opening_columns
    from tests.fixtures.temporal import make_pipeline, make_settings

    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(tmp_path / "d", workspace)
    pipeline = make_pipeline(settings)
    session = Session(session_id="s", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="write_file", input={"path": "a", "content": "b"})
    import asyncio

    verdict = asyncio.run(pipeline.classify(call, session))
    assert isinstance(verdict, NeedsApproval)
    prepared = verdict.prepared.model_copy(update={
        "rule": "remembered:abc", "remembered_by": "ana", "remembered_principal": "key:k1"})
    columns = opening_columns(opening_of(prepared, "execute"))
    assert {k: columns[k] for k in ("decision", "via", "decided_by", "principal_id")} == {
        "decision": "allow", "via": "remembered", "decided_by": "ana", "principal_id": "key:k1"}
    # ...exactly what the older histories' row said.
    old = prepared_fields(prepared)
    assert {k: old[k] for k in ("decision", "via", "decided_by", "principal_id")} == {
        k: columns[k] for k in ("decision", "via", "decided_by", "principal_id")}
