"""TurnWorkflow: children under the session cap, results in input order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from parkgate.models import ToolUseBlock
from parkgate.records import CallStatus
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
