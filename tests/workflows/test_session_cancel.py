"""cancel_session_tools on the dev server (needs visibility queries)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from parkgate.calls.records import CallStatus
from parkgate.models import ToolErrorClass, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import dev_client, durable_rig

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]


async def test_cancel_session_tools_cancels_every_call_of_the_session(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    policy = {"per_tool": {"shell": "auto"}}
    async with durable_rig(client, sqlite_repo, tmp_path, policy=policy) as rig:
        target, other = rig.session("s-cancel-me"), rig.session("s-keep-me")
        parked = [
            ToolUseBlock(id=f"w{i}", name="write_file", input={"path": f"w{i}", "content": "x"})
            for i in range(2)
        ]
        running = ToolUseBlock(
            id="sh", name="shell", input={"command": "echo begun; touch begun; sleep 4343"}
        )
        handles = [await rig.dispatcher.start(c, target) for c in [*parked, running]]
        keep = await rig.dispatcher.start(parked[0], other)
        for c in parked:
            await rig.wait_parked(target.session_id, c.id)
        await rig.wait_parked(other.session_id, parked[0].id)
        for _ in range(200):
            if (rig.workspace / "begun").exists():
                break
            await asyncio.sleep(0.05)

        # Visibility is eventually consistent: wait until it lists all three.
        query = (
            f'WorkflowId STARTS_WITH "call/{target.session_id}/" '
            "AND ExecutionStatus = 'Running'"
        )
        for _ in range(100):
            if len([w async for w in client.list_workflows(query)]) == 3:
                break
            await asyncio.sleep(0.1)
        assert await rig.dispatcher.cancel_session_tools(target.session_id) == 3
        outcomes = [await h.result() for h in handles]
        assert [o.error_class for o in outcomes] == [ToolErrorClass.CANCELLED] * 3
        assert "begun" in outcomes[2].result.text  # partial output of the shell
        assert not (rig.workspace / "w0").exists()

        view = await rig.dispatcher.status(other.session_id, parked[0].id)
        assert view.status == CallStatus.PARKED  # another session is untouched
        await keep.cancel()
        assert (await keep.result()).status == CallStatus.CANCELLED


async def test_a_batch_cancelled_by_session_names_the_canceller_in_every_call(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """A batch's calls get the session cancel's own request (calls are cancelled
    before their turn, whose cancel reaches them without a reason)."""
    from parkgate.calls.cancellation import Cancellation

    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path) as rig:
        session = rig.session("s-batch-cancel")
        calls = [ToolUseBlock(id=f"b{i}", name="write_file", input={"path": f"b{i}",
                                                                   "content": "x"})
                 for i in range(3)]
        await rig.dispatcher.start_turn(calls, session)
        for c in calls:
            await rig.wait_parked(session.session_id, c.id)
        query = (f'WorkflowId STARTS_WITH "call/{session.session_id}/" '
                 "AND ExecutionStatus = 'Running'")
        for _ in range(100):
            if len([w async for w in client.list_workflows(query)]) == 3:
                break
            await asyncio.sleep(0.1)
        who = Cancellation(by="cli:ann", via="parkgate cancel", reason="wrong batch")
        assert await rig.dispatcher.cancel_session_tools(session.session_id, who) >= 3
        for c in calls:
            outcome = await rig.dispatcher.attach(session.session_id, c.id)
            assert outcome.result.text == "The call was cancelled before it ran (by cli:ann " \
                "via parkgate cancel: wrong batch).", outcome.result.text
        assert not any((rig.workspace / f"b{i}").exists() for i in range(3))
