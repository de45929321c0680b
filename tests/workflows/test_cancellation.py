"""Cancelling a running shell call: the process group dies, partial output comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
from temporalio.testing import WorkflowEnvironment

from parkgate import ToolContext
from parkgate.models import (
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolUseBlock,
)
from parkgate.records import CallStatus
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
