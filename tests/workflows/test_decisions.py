"""Decisions are recorded exactly as Temporal committed them (issue 12).

After a call parks, every store write that depends on the decision is made by a
regular activity (scheduled only when the accepting workflow task commits):
never by a local activity inside a task Temporal may still discard.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import text
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.durable.audit import compare_store_with_temporal
from parkgate.durable.payloads import ACT_EXECUTE, ACT_RECORD_COMMITTED
from parkgate.models import ToolErrorClass, ToolUseBlock, input_hash
from parkgate.workflows.call_record import PATCH_COMMITTED_WRITES
from tests.fixtures.temporal import durable_rig


async def kinds_after_acceptance(handle: WorkflowHandle[Any, Any]) -> tuple[list[str], list[str]]:
    """(event kinds after the first accepted update, activity types scheduled)."""
    kinds: list[str] = []
    activities: list[str] = []
    seen = False
    async for event in handle.fetch_history_events():
        kind = event.WhichOneof("attributes") or ""
        if kind == "workflow_execution_update_accepted_event_attributes":
            seen = True
        if kind == "activity_task_scheduled_event_attributes":
            activities.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        if seen:
            kinds.append(kind)
    return kinds, activities


async def test_many_concurrent_deciders_store_names_the_winner(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_m", name="write_file", input={"path": "m.txt", "content": "m"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_m")
        results = await asyncio.gather(
            *(
                rig.dispatcher.decide(
                    request_id,
                    "allow" if i % 2 else "deny",
                    decided_by=f"user{i}",
                    via="api" if i % 3 else "link",
                )
                for i in range(12)
            )
        )
        accepted = [r for r in results if r.accepted]
        assert len(accepted) == 1
        winner = accepted[0].winner
        assert winner is not None
        assert all(r.winner == winner for r in results if not r.accepted), [
            (r.message, r.winner) for r in results
        ]
        outcome = await handle.result()
        assert outcome.decision == winner

        row = await sqlite_repo.get_call(session.session_id, "tu_m")
        assert (row.decision, row.decided_by) == (winner.decision, winner.decided_by)
        approval = await sqlite_repo.get_approval(request_id)
        assert (approval.decision, approval.decided_by) == (winner.decision, winner.decided_by)
        assert approval.info.get("input_summary")  # the request itself is kept as stored
        timeline = [e.event for e in await sqlite_repo.timeline(session.session_id, "tu_m")]
        resolved = [e for e in timeline if e.type == "tool.confirmation_resolved"]
        assert len(resolved) == 1
        meaning = await sqlite_repo.verify_meaning(session.session_id)
        assert meaning.ok, [p.describe() for p in meaning.problems]
        assert resolved[0].data["decided_by"] == winner.decided_by
        types = [e.type for e in timeline]
        if winner.decision == "allow":
            assert types == [
                "tool.confirmation_requested",
                "tool.confirmation_resolved",
                "tool.called",
                "tool.completed",
            ]
            assert (rig.workspace / "m.txt").exists()
        else:
            assert types == [
                "tool.confirmation_requested",
                "tool.confirmation_resolved",
                "tool.failed",
            ]
            assert not (rig.workspace / "m.txt").exists()


async def test_allow_writes_resolution_with_the_execute_activity(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_a", name="write_file", input={"path": "a.txt", "content": "a"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_a")
        await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="alice")
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED
        kinds, activities = await kinds_after_acceptance(handle)
        # No local activity (marker) after the decision: only the patch marker.
        markers = [k for k in kinds if k == "marker_recorded_event_attributes"]
        assert len(markers) <= 1
        assert activities[-1] == ACT_EXECUTE  # the resolution rides along: no extra step
        assert ACT_RECORD_COMMITTED not in activities
        history = await handle.fetch_history()
        assert PATCH_COMMITTED_WRITES.encode() in history.events[-1].SerializeToString() or any(
            PATCH_COMMITTED_WRITES.encode() in e.SerializeToString() for e in history.events
        )
        types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_a")]
        assert types[1:3] == ["tool.confirmation_resolved", "tool.called"]


async def test_deny_is_one_committed_write(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_n", name="write_file", input={"path": "n.txt", "content": "n"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_n")
        await rig.dispatcher.resolve_confirmation(request_id, "deny", decided_by="bob")
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.USER_DENIED
        kinds, activities = await kinds_after_acceptance(handle)
        assert activities[-1] == ACT_RECORD_COMMITTED
        assert [k for k in kinds if k == "marker_recorded_event_attributes"] == [
            "marker_recorded_event_attributes"  # the patch marker, no local activity
        ]
        timeline = [e.event for e in await sqlite_repo.timeline(session.session_id, "tu_n")]
        assert [e.type for e in timeline] == [
            "tool.confirmation_requested",
            "tool.confirmation_resolved",
            "tool.failed",
        ]
        approval = await sqlite_repo.get_approval(request_id)
        assert approval.decision == "deny" and approval.decided_by == "bob"


async def test_accepted_edit_wins_and_later_deciders_lose(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """An accepted edit (revalidated under the decide lock) runs; later deciders lose."""
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_e", name="write_file", input={"path": "e.txt", "content": "e"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_e")
        result = await rig.dispatcher.decide(
            request_id,
            "allow_with_edits",
            edited_input={"path": "e.txt", "content": "edited"},
            decided_by="carol",
        )
        assert result.accepted
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED
        late = await rig.dispatcher.decide(request_id, "deny", decided_by="dave")
        assert not late.accepted
        assert (rig.workspace / "e.txt").read_text() == "edited"


async def test_store_is_compared_with_temporal_histories(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_t", name="write_file", input={"path": "t.txt", "content": "t"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_t")
        await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="alice")
        await handle.result()
        report = await compare_store_with_temporal(
            sqlite_repo, temporal_env.client, session.session_id
        )
        assert report.ok and report.compared == 1, report.problems
        meaning = await sqlite_repo.verify_meaning(session.session_id)
        assert meaning.ok, [p.describe() for p in meaning.problems]

        # A store that names someone else than Temporal committed is reported.
        async with sqlite_repo.engine.begin() as conn:
            await conn.execute(
                text("UPDATE tool_calls SET decided_by = 'mallory' WHERE tool_use_id = 'tu_t'")
            )
        report = await compare_store_with_temporal(
            sqlite_repo, temporal_env.client, session.session_id
        )
        assert [p.detail for p in report.problems] == [
            "against Temporal: store says allow by mallory, Temporal committed allow by alice"
        ]


#: The payload fields older workflows filled with whole call rows.
_ROW_FIELDS = ("update", "initial", "final", "run_row")


async def scheduled_inputs(
    client: Any, handle: WorkflowHandle[Any, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """(activity type, decoded input) of every activity the workflow scheduled."""
    found = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            [value] = await client.data_converter.decode(attrs.input.payloads)
            found.append((attrs.activity_type.name, value))
    return found


async def test_the_workflow_hands_activities_ids_and_facts_never_rows(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """Issue 16: the store owns call rows. A parked call that is edited and
    allowed, and one that is denied: every activity input names the call by
    `ref` and carries facts (a decision, an outcome), never a row; the stored
    rows still say everything (who decided, the edited input, the outcome)."""
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        for call_id, decision in (("tu_e", "allow_with_edits"), ("tu_d", "deny")):
            call = ToolUseBlock(id=call_id, name="write_file",
                                input={"path": f"{call_id}.txt", "content": "draft"})
            handle = await rig.dispatcher.start(call, session)
            request_id = await rig.wait_parked(session.session_id, call_id)
            edited = {"path": f"{call_id}.txt", "content": "final"}
            result = await rig.dispatcher.decide(
                request_id, decision, decided_by="ana", via="api", reason="checked",
                edited_input=edited if decision == "allow_with_edits" else None,
                principal_id="key:k-ana",
            )
            assert result.accepted, result.message
            await handle.result()
            inputs = await scheduled_inputs(temporal_env.client, handle)
            assert inputs, "no activity scheduled"
            for name, value in inputs:
                carried = [f for f in _ROW_FIELDS if isinstance(value, dict) and value.get(f)]
                assert not carried, f"{name} carries a row in {carried}"
            by_name = dict(inputs)
            assert by_name["parkgate.create_approval"]["ref"]["tool_use_id"] == call_id
            row = await sqlite_repo.get_call(session.session_id, call_id)
            assert (row.decision, row.decided_by, row.via, row.principal_id) == (
                decision, "ana", "api", "key:k-ana")
            assert row.verdict == "needs_approval" and row.request_id == request_id
            if decision == "deny":
                assert by_name[ACT_RECORD_COMMITTED]["facts"]["status"] == "denied"
                assert row.status == CallStatus.DENIED and row.reason == "checked"
                assert row.result is not None and row.result.is_error
            else:
                assert by_name[ACT_EXECUTE]["ref"]["tool_use_id"] == call_id
                assert row.status == CallStatus.SUCCEEDED
                assert row.input == edited and row.input_hash != input_hash("write_file",
                                                                             call.input)
                assert (rig.workspace / f"{call_id}.txt").read_text() == "final"
            meaning = await sqlite_repo.verify_meaning(session.session_id)
            assert meaning.ok, [p.describe() for p in meaning.problems]
