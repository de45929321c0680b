"""Cancelling a running shell call: the process group dies, partial output comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
from temporalio.testing import WorkflowEnvironment

from parkgate import ToolContext
from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import ACT_EXECUTE
from parkgate.models import (
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolUseBlock,
)
from parkgate.runtime.worker import build_worker
from tests.fixtures.temporal import AUTO_ALL, durable_rig


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


async def test_cancel_running_shell_kills_group_and_returns_partial_output(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path, policy=AUTO_ALL) as rig:
        session = rig.session()
        started = rig.workspace / "started"
        command = "echo partial-output-line; touch started; sleep 4242; echo never"
        call = ToolUseBlock(id="tu_sh", name="shell", input={"command": command})
        handle = await rig.dispatcher.start(call, session)
        await wait_for(started.exists)
        await wait_for(lambda: bool(sleepers("sleep 4242")))
        await rig.dispatcher.cancel(session.session_id, "tu_sh")
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.CANCELLED, outcome.result.text
        assert outcome.status == CallStatus.CANCELLED
        assert "partial-output-line" in outcome.result.text
        assert "never" not in outcome.result.text
        await wait_for(lambda: not sleepers("sleep 4242"), timeout=10)
        row = await sqlite_repo.get_call(session.session_id, "tu_sh")
        assert row.status == CallStatus.CANCELLED
        types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_sh")]
        assert types == ["tool.called", "tool.failed"]


class SlowRead:
    """A READ tool that waits until cancelled (test tool); auto-approved by default."""

    definition = ToolDefinition(
        name="slow_read",
        description="Read slowly (test tool).",
        input_schema={"type": "object"},
        side_effects=SideEffects.READ,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        while not (context.cancel_event is not None and context.cancel_event.is_set()):
            await asyncio.sleep(0.02)
        return ToolOutput(content=[TextBlock(text="stopped early")], success=False)

    async def cancel(self) -> bool:
        return True


async def test_cancel_auto_read_running_inside_classify(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """An auto read runs inside the classify activity; cancelling the call stops it
    and the call ends `cancelled`, row and outcome agreeing."""
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, extra_tools=[SlowRead]
    ) as rig:
        session = rig.session()
        handle = await rig.dispatcher.start(
            ToolUseBlock(id="tu_slow", name="slow_read", input={}), session
        )

        async def running() -> bool:
            row = await sqlite_repo.get_call(session.session_id, "tu_slow")
            return row is not None and row.status == CallStatus.RUNNING

        deadline = asyncio.get_running_loop().time() + 20
        while not await running():
            assert asyncio.get_running_loop().time() < deadline, "never shown running"
            await asyncio.sleep(0.05)
        await rig.dispatcher.cancel(session.session_id, "tu_slow")
        outcome = await handle.result()
        assert outcome.status == CallStatus.CANCELLED, outcome.result.text
        assert outcome.error_class == ToolErrorClass.CANCELLED
        row = await sqlite_repo.get_call(session.session_id, "tu_slow")
        assert row.status == CallStatus.CANCELLED
        types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_slow")]
        assert types[0] == "tool.called" and types[-1] == "tool.failed"


class GatedWrite:
    """A WRITE tool that writes its file, then returns only once `release` is set."""

    definition = ToolDefinition(
        name="gated_write",
        description="Write a file, then wait (test tool).",
        input_schema={"type": "object"},
        side_effects=SideEffects.WRITE,
    )
    wrote = asyncio.Event()
    release = asyncio.Event()

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        (Path(context.workspace_path) / "gated.txt").write_text("x")
        GatedWrite.wrote.set()
        await GatedWrite.release.wait()
        return ToolOutput(content=[TextBlock(text="written")])

    async def cancel(self) -> bool:
        return False


async def test_a_cancel_seen_with_the_write_s_completion_keeps_it_succeeded(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The workflow learns of a cancel request and of its finished execute
    activity in the same activation (no workflow worker while both happened):
    the SDK then raises the cancellation although the activity succeeded and
    recorded it. The call stays `succeeded`, not `cancelled` over its write."""
    GatedWrite.wrote, GatedWrite.release = asyncio.Event(), asyncio.Event()
    client = temporal_env.client
    async with durable_rig(
        client, sqlite_repo, tmp_path, policy=AUTO_ALL, extra_tools=[GatedWrite],
        run_worker=False,
    ) as rig:
        def workflows_only() -> Any:
            # No sticky cache: the next worker takes the workflow task from the queue.
            return build_worker(client, rig.settings, rig.deps, no_remote_activities=True,
                                max_cached_workflows=0)

        async with build_worker(client, rig.settings, rig.deps, workflows=[]):
            session = rig.session()
            async with workflows_only():
                handle = await rig.dispatcher.start(
                    ToolUseBlock(id="tu_g", name="gated_write", input={}), session
                )
                await asyncio.wait_for(GatedWrite.wrote.wait(), 20)
            await handle.cancel()  # no workflow worker: the request waits...
            GatedWrite.release.set()  # ...and the activity completes meanwhile
            await wait_for_event(handle, "activity_task_completed_event_attributes", ACT_EXECUTE)
            async with workflows_only():
                outcome = await handle.result()
    assert (rig.workspace / "gated.txt").exists()
    assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
    row = await sqlite_repo.get_call(session.session_id, "tu_g")
    assert row.status == CallStatus.SUCCEEDED
    types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_g")]
    assert types == ["tool.called", "tool.completed"]


async def wait_for_event(handle: Any, field: str, activity: str, timeout: float = 20) -> None:
    """Until the history has a `field` event of the activity named `activity`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        history = await handle.fetch_history()
        names = {
            e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        }
        for e in history.events:
            if e.HasField(field) and names.get(getattr(e, field).scheduled_event_id) == activity:
                return
        assert asyncio.get_running_loop().time() < deadline, f"no {field} for {activity}"
        await asyncio.sleep(0.05)
