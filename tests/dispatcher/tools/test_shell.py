"""The shell tool: capture, guard, process group, cancellation with partial output."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from parkgate import Limits, ToolContext, ToolValidationError, WorkspaceFileAPI
from parkgate.tools import ShellTool, shell_guard
from tests.dispatcher.conftest import until_exists


def ctx(workspace: Path, **limits: Any) -> ToolContext:
    return ToolContext(
        session_id="s",
        turn_id="t",
        tool_use_id="tu",
        workspace_path=str(workspace),
        cancel_event=asyncio.Event(),
        logger=logging.getLogger("test"),
        workspace_files=WorkspaceFileAPI(str(workspace)),
        limits=Limits(**limits),
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_captures_stdout_stderr_exit_code_in_workspace(workspace: Path) -> None:
    out = await ShellTool().execute({"command": "pwd; echo oops >&2; exit 3"}, ctx(workspace))
    assert out.success is False
    assert out.metadata["exit_code"] == 3
    assert out.metadata["stdout"].strip() == os.path.realpath(workspace)  # noqa: ASYNC240
    assert out.metadata["stderr"] == "oops\n"
    assert out.command_executed == "pwd; echo oops >&2; exit 3"
    text = out.content[0].text  # type: ignore[union-attr]
    assert text.startswith("Exit code: 3") and "--- stderr ---\noops" in text


async def test_success(workspace: Path) -> None:
    out = await ShellTool().execute({"command": "cat README.md"}, ctx(workspace))
    assert out.success and "# Project Foo" in out.metadata["stdout"]


def test_guard() -> None:
    assert shell_guard("ls", 2048) == []
    assert "over the 2048-character limit" in shell_guard("x" * 2049, 2048)[0]
    assert "NUL" in shell_guard("ls\x00", 2048)[0]
    assert shell_guard("x" * 2048, 2048) == []
    multiline = shell_guard("echo one\ntouch x", 2048)
    assert len(multiline) == 1 and "multiline commands are rejected" in multiline[0]
    assert "sh script.sh" in multiline[0]
    assert shell_guard("echo one\r\ntouch x", 2048)
    assert shell_guard("   ", 2048)


async def test_guard_at_execute_time_too(workspace: Path) -> None:
    with pytest.raises(ToolValidationError):
        await ShellTool().execute({"command": "x" * 50}, ctx(workspace, shell_max_command_chars=10))
    with pytest.raises(ToolValidationError, match="line break"):
        await ShellTool().execute({"command": "echo one\ntouch x"}, ctx(workspace))
    assert not (workspace / "x").exists()  # nothing ran


async def test_output_truncated_for_model_full_in_metadata(workspace: Path) -> None:
    out = await ShellTool().execute(
        {"command": "head -c 5000 /dev/zero | tr '\\0' 'a'"}, ctx(workspace, text_chars=1000)
    )
    assert len(out.metadata["stdout"]) == 5000
    text = out.content[0].text  # type: ignore[union-attr]
    assert "[truncated: 4000 more characters]" in text


def host_pids(marker: str) -> list[int]:
    """Host pids of live processes whose command line holds `marker` (a sandboxed
    child's own $! is a pid in its namespace, meaningless out here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "sh -c" not in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_cancel_returns_partial_output_and_kills_group(workspace: Path, sandbox: str) -> None:
    tool = ShellTool()
    c = ctx(workspace, shell_kill_after_seconds=1.0, tool_sandbox=sandbox)
    marker = f"60.{os.getpid()}{len(sandbox)}"
    cmd = f"echo started; sleep {marker} & echo $! > child.tmp; mv child.tmp child.pid; sleep 60"
    task = asyncio.create_task(tool.execute({"command": cmd}, c))
    await until_exists(workspace / "child.pid")
    children = host_pids(f"sleep {marker}")
    assert len(children) == 1
    t0 = time.monotonic()
    c.cancel_event.set()
    out = await asyncio.wait_for(task, timeout=10)
    assert time.monotonic() - t0 < 30  # not the 60 s the command would take
    assert out.success is False and out.metadata["cancelled"] is True
    assert out.metadata["stdout"] == "started\n"
    assert "partial output" in out.content[0].text  # type: ignore[union-attr]
    for _ in range(50):
        if not alive(children[0]):
            break
        await asyncio.sleep(0.05)
    assert not alive(children[0])
    assert await tool.cancel() is True  # idempotent


@pytest.mark.parametrize("sandbox", ["off", "auto"])
async def test_cancel_escalates_to_sigkill(workspace: Path, sandbox: str) -> None:
    tool = ShellTool()
    c = ctx(workspace, shell_kill_after_seconds=0.5, tool_sandbox=sandbox)
    task = asyncio.create_task(
        tool.execute({"command": "trap '' TERM; echo stubborn; touch ready; "
                                 "while :; do sleep 0.1; done"}, c)
    )
    await until_exists(workspace / "ready")
    t0 = time.monotonic()
    assert await tool.cancel() is True
    elapsed = time.monotonic() - t0
    out = await asyncio.wait_for(task, timeout=10)
    assert elapsed >= 0.4  # SIGTERM ignored: SIGKILL only after shell_kill_after_seconds
    assert out.metadata["exit_code"] == -9
    assert out.metadata["stdout"] == "stubborn\n"


async def test_cancel_before_start_and_after_finish(workspace: Path) -> None:
    tool = ShellTool()
    assert await tool.cancel() is False
    await tool.execute({"command": "true"}, ctx(workspace))
    assert await tool.cancel() is False


async def test_background_child_does_not_hang_the_call(workspace: Path) -> None:
    t0 = time.monotonic()
    out = await asyncio.wait_for(
        ShellTool().execute({"command": "sleep 30 & echo bg"}, ctx(workspace)), timeout=10
    )
    assert time.monotonic() - t0 < 5
    assert out.success and out.metadata["stdout"] == "bg\n"
