"""The spec's five worked examples, end to end through the in-process dispatcher."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from parkgate import Limits, Session, SideEffects, ToolErrorClass, ToolUseBlock
from tests.dispatcher.conftest import answer_next, until_exists


async def test_example_1_read_auto(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher()
    result = await d.dispatch(
        ToolUseBlock(id="tu_01HZ_a", name="read_file", input={"path": "README.md"}), session
    )
    assert result.tool_use_id == "tu_01HZ_a" and result.is_error is False
    assert result.text.startswith("# Project Foo\n")
    assert log.types() == ["tool.called", "tool.completed"]
    called = log.events[0]
    assert called.tool_name == "read_file" and called.side_effects == SideEffects.READ
    assert log.of("tool.confirmation_requested") == []


async def test_example_2_workspace_escape(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher()
    result = await d.dispatch(
        ToolUseBlock(id="tu_01HZ_b", name="read_file", input={"path": "../../etc/passwd"}), session
    )
    assert result.is_error and result.error_class == ToolErrorClass.PERMISSION_DENIED
    assert "escapes workspace boundary" in result.text
    assert "root:" not in result.text
    assert log.types() == ["tool.failed"]
    assert log.events[0].error_class == ToolErrorClass.PERMISSION_DENIED
    assert log.events[0].message and "escapes workspace boundary" in log.events[0].message


async def test_example_3_write_denied_by_user(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, log = make_dispatcher()
    call = ToolUseBlock(
        id="tu_01HZ_c",
        name="write_file",
        input={"path": "src/auth.ts", "content": "export const token = 'x';\n"},
    )
    task = asyncio.create_task(d.dispatch(call, session))
    requested = await answer_next(d, log, "deny")
    result = await task
    assert requested.tool_name == "write_file"
    assert requested.data["input_summary"].startswith('path="src/auth.ts"')
    assert requested.data["side_effects"] == "write"
    assert requested.data["projected_impact"] == ["will modify src/auth.ts"]
    assert "+export const token = 'x';" in requested.data["diff"]
    assert log.of("tool.confirmation_resolved")[0].data["decision"] == "deny"
    assert result.is_error and result.error_class == ToolErrorClass.USER_DENIED
    assert result.text == "User denied this operation."
    assert log.types() == [
        "tool.confirmation_requested",
        "tool.confirmation_resolved",
        "tool.failed",
    ]
    assert log.events[-1].error_class == ToolErrorClass.USER_DENIED
    assert (workspace / "src/auth.ts").read_text() == "export const token = 'old';\n"


async def test_example_4_cancel_long_shell(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    # "auto in trusted workspace": EXECUTE is lowered to auto for this workspace.
    d, log = make_dispatcher(
        {"trusted_workspaces": [str(workspace)], "trusted_workspace_overrides": {}},
        limits=Limits(shell_kill_after_seconds=3.0),
    )
    # A stand-in for `npm install` that ignores SIGTERM, so the SIGKILL path runs too.
    command = "trap '' TERM; echo 'added 12 packages'; touch .ready; while :; do sleep 0.1; done"
    task = asyncio.create_task(
        d.dispatch(ToolUseBlock(id="tu_01HZ_d", name="shell", input={"command": command}), session)
    )
    await until_exists(workspace / ".ready")
    assert log.types() == ["tool.called"]
    assert "trusted_workspace:" in log.events[0].data["rule"]
    t0 = time.monotonic()
    await d.cancel_session_tools(session.session_id)
    result = await asyncio.wait_for(task, 15)
    elapsed = time.monotonic() - t0
    assert elapsed >= 2.5  # SIGTERM ignored -> SIGKILL after 3 s
    assert result.is_error and result.error_class == ToolErrorClass.CANCELLED
    assert "added 12 packages" in result.text
    failed = log.of("tool.failed")[0]
    assert failed.error_class == ToolErrorClass.CANCELLED
    assert "added 12 packages" in failed.data["partial_output"]


async def test_example_5_parallel_reads(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    for name in "abc":
        (workspace / f"{name}.txt").write_text(f"content of {name}\n")
    d, log = make_dispatcher()
    calls = [
        ToolUseBlock(id=f"tu_01HZ_{i}", name="read_file", input={"path": f"{n}.txt"})
        for i, n in zip("efg", "abc", strict=True)
    ]
    results = await d.dispatch_all(calls, session)
    assert [r.tool_use_id for r in results] == ["tu_01HZ_e", "tu_01HZ_f", "tu_01HZ_g"]
    assert [r.text for r in results] == ["content of a\n", "content of b\n", "content of c\n"]
    for c in calls:
        assert log.types(c.id) == ["tool.called", "tool.completed"]
