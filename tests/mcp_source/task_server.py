"""A real FastMCP server with the tasks extension (fastmcp-tasks, SEP-2663) over
stdio, run as a subprocess by tests/mcp_source/test_mcp_tasks_source.py. Its
tools run as tasks: parkgate's call gets a task and must follow it. MARK_FILE
collects what ran; a cancelled `long_job` writes `cancelled` there."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

mcp = FastMCP("tasks")
mcp.add_extension(TasksExtension())


def mark(line: str) -> None:
    with open(os.environ["MARK_FILE"], "a") as out:
        out.write(line + "\n")


@mcp.tool(task=True, annotations={"readOnlyHint": True})
async def slow_sum(a: int, b: int) -> str:
    """Adds two numbers, slowly."""
    await asyncio.sleep(0.3)
    mark(f"sum {a}+{b}")
    return f"sum={a + b}"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200)),
          annotations={"destructiveHint": True})
async def long_job(seconds: float) -> str:
    """Works for `seconds`; records a cancellation."""
    mark("started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        mark("cancelled")
        raise
    mark("finished")
    return "done"


@mcp.tool(task=TaskConfig(mode="required", poll_interval=timedelta(milliseconds=200)),
          annotations={"readOnlyHint": True})
async def broken() -> str:
    """Fails inside its task."""
    raise ValueError("the downstream tool broke")


if __name__ == "__main__":
    mcp.run(show_banner=False)
