"""TurnWorkflow: children under the session cap, results in input order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock
from tests.fixtures.temporal import durable_rig


async def test_turn_of_nine_respects_the_cap_and_keeps_order(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, session_concurrency=4
    ) as rig:
        session = rig.session()
        # Later calls are faster, so completion order differs from input order.
        calls = [
            ToolUseBlock(
                id=f"tu_{i}", name="probe", input={"label": f"c{i}", "delay": 1.2 - i * 0.1}
            )
            for i in range(9)
        ]
        results = await rig.dispatcher.dispatch_all(calls, session)
        assert [r.tool_use_id for r in results] == [c.id for c in calls]
        assert [r.text for r in results] == [f"probe c{i}" for i in range(9)]
        assert rig.probe.max_running == 4
        assert len(rig.probe.order) == 9
        assert rig.probe.order != [f"c{i}" for i in range(9)]
        for c in calls:
            row = await sqlite_repo.get_call(session.session_id, c.id)
            assert row.status == CallStatus.SUCCEEDED
            assert row.workflow_id == f"call/{session.session_id}/{c.id}"

        # Resubmitting the turn attaches; nothing runs again.
        again = await rig.dispatcher.dispatch_all(calls, session)
        assert again == results
        assert len(rig.probe.order) == 9


async def test_turn_cap_of_two_and_mixed_outcomes(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, session_concurrency=2
    ) as rig:
        session = rig.session()
        calls = [
            ToolUseBlock(id="a", name="probe", input={"label": "a", "delay": 0.1}),
            ToolUseBlock(id="b", name="nope", input={}),
            ToolUseBlock(id="c", name="probe", input={"label": "c", "delay": 0.1}),
            ToolUseBlock(id="d", name="probe", input={"label": "d", "delay": 0.1}),
        ]
        results = await rig.dispatcher.dispatch_all(calls, session)
        assert [r.tool_use_id for r in results] == ["a", "b", "c", "d"]
        assert [r.is_error for r in results] == [False, True, False, False]
        assert rig.probe.max_running <= 2


async def test_a_call_of_another_turn_is_attached_and_never_runs_again(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """Issue 28 (6): the same tool_use id in a later batch attaches to the call,
    whichever turn started it; no second run, no contradicting event."""
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        first = rig.session(turn_id="turn-1")
        alone = ToolUseBlock(id="solo", name="probe", input={"label": "solo", "delay": 0})
        batched = ToolUseBlock(id="b1", name="probe", input={"label": "b1", "delay": 0})
        assert (await rig.dispatcher.dispatch(alone, first)).text == "probe solo"
        await rig.dispatcher.dispatch_all([batched, alone], first)
        assert sorted(rig.probe.order) == ["b1", "solo"]
        later = first.model_copy(update={"turn_id": "turn-2"})
        fresh = ToolUseBlock(id="new", name="probe", input={"label": "new", "delay": 0})
        start = await rig.dispatcher.start_turn([batched, alone, fresh], later)
        assert start.attached == {"b1": "turn-1", "solo": "turn-1"}
        assert [c.id for c in start.calls] == ["new"]
        results = await rig.dispatcher.dispatch_all([batched, alone, fresh], later)
        assert [r.text for r in results] == ["probe b1", "probe solo", "probe new"]
        assert sorted(rig.probe.order) == ["b1", "new", "solo"]  # nothing ran twice
        for call_id, turn in (("solo", "turn-1"), ("b1", "turn-1"), ("new", "turn-2")):
            row = await sqlite_repo.get_call(first.session_id, call_id)
            assert row.turn_id == turn
        assert await sqlite_repo.event_conflicts() == []


async def test_a_turn_started_directly_refuses_a_finished_call(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The turn workflow itself never starts a finished call again (a client that
    starts it without the dispatcher's check): that call's outcome is an error."""
    from parkgate.durable.payloads import TURN_WORKFLOW, TurnInput, TurnOutcome

    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        session = rig.session(turn_id="turn-1")
        done = ToolUseBlock(id="done", name="probe", input={"label": "done", "delay": 0})
        await rig.dispatcher.dispatch(done, session)
        outcome = await temporal_env.client.execute_workflow(
            TURN_WORKFLOW,
            TurnInput(calls=[done], session=session.model_copy(update={"turn_id": "turn-9"})),
            id=f"turn/{session.session_id}/direct",
            task_queue=rig.settings.temporal_task_queue,
            result_type=TurnOutcome,
        )
        [result] = outcome.results
        assert result.is_error and "already submitted" in result.text
        assert rig.probe.order == ["done"]
        row = await sqlite_repo.get_call(session.session_id, "done")
        assert row.turn_id == "turn-1" and row.status == CallStatus.SUCCEEDED
        assert await sqlite_repo.event_conflicts() == []
