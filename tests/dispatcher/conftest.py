"""Fixtures for dispatcher tests: a workspace, a session, a dispatcher, an event log."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from parkgate import (
    ConfirmationPolicy,
    Limits,
    Session,
    ToolDispatcher,
    ToolEvent,
    builtin_tools,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "README.md").write_text("# Project Foo\nhello\n")
    (root / "src").mkdir()
    (root / "src" / "auth.ts").write_text("export const token = 'old';\n")
    return root


@pytest.fixture
def session(workspace: Path) -> Session:
    return Session(session_id="sess-1", turn_id="turn-1", workspace_path=str(workspace))


class EventLog:
    """Collects events; can auto-answer confirmation requests."""

    def __init__(self) -> None:
        self.events: list[ToolEvent] = []
        self.requested: asyncio.Queue[ToolEvent] = asyncio.Queue()

    def __call__(self, event: ToolEvent) -> None:
        self.events.append(event)
        if event.type == "tool.confirmation_requested":
            self.requested.put_nowait(event)

    def types(self, tool_use_id: str | None = None) -> list[str]:
        return [e.type for e in self.events if tool_use_id is None or e.tool_use_id == tool_use_id]

    def of(self, type_: str) -> list[ToolEvent]:
        return [e for e in self.events if e.type == type_]


@pytest.fixture
def make_dispatcher() -> Callable[..., tuple[ToolDispatcher, EventLog]]:
    def make(
        policy: ConfirmationPolicy | dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[ToolDispatcher, EventLog]:
        if isinstance(policy, dict):
            policy = ConfirmationPolicy.from_mapping(policy)
        kwargs.setdefault("limits", Limits(shell_kill_after_seconds=0.5, cancel_grace_seconds=5))
        d = ToolDispatcher(policy, tools=builtin_tools(), **kwargs)
        log = EventLog()
        d.on_event(log)
        return d, log

    return make


async def answer_next(d: ToolDispatcher, log: EventLog, decision: str, **kwargs: Any) -> ToolEvent:
    """Wait for the next confirmation request and answer it."""
    event = await asyncio.wait_for(log.requested.get(), timeout=10)
    assert event.request_id
    await d.resolve_confirmation(event.request_id, decision, **kwargs)
    return event


async def until_exists(path: Path, timeout: float = 60.0) -> None:
    """Wait until a command has reached the point where it creates `path`.

    Cancellation tests wait for this instead of a fixed sleep: on a loaded
    machine a shell (sandbox setup included) may take seconds to get going.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    while not path.exists():  # noqa: ASYNC240 (a stat, polled)
        assert asyncio.get_running_loop().time() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.05)
