"""The in-process ToolDispatcher: confirmation flow, events, concurrency, cancellation."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from parkgate import (
    Session,
    SideEffects,
    TextBlock,
    ToolContext,
    ToolDefinition,
    ToolDispatcher,
    ToolErrorClass,
    ToolEvent,
    ToolOutput,
    ToolUseBlock,
)
from tests.dispatcher.conftest import answer_next, until_exists


def write(i: str, path: str = "out.txt", content: str = "hello\n") -> ToolUseBlock:
    return ToolUseBlock(id=i, name="write_file", input={"path": path, "content": content})


async def test_prompt_allow(make_dispatcher: Any, session: Session, workspace: Path) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("w1"), session))
    ev = await answer_next(d, log, "allow", decided_by="alice")
    result = await task
    assert not result.is_error and result.text == "Created out.txt (6 bytes)"
    assert (workspace / "out.txt").read_text() == "hello\n"
    assert log.types("w1") == [
        "tool.confirmation_requested",
        "tool.confirmation_resolved",
        "tool.called",
        "tool.completed",
    ]
    assert ev.data["projected_impact"] == ["will create out.txt"]
    resolved = log.of("tool.confirmation_resolved")[0]
    assert resolved.request_id == ev.request_id
    assert resolved.data["decision"] == "allow" and resolved.data["decided_by"] == "alice"


async def test_prompt_deny_with_reason(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("w2"), session))
    await answer_next(d, log, "deny", reason="not on Fridays")
    result = await task
    assert result.is_error and result.error_class == ToolErrorClass.USER_DENIED
    assert result.text == "User denied this operation. Reason: not on Fridays"
    assert not (workspace / "out.txt").exists()
    failed = log.of("tool.failed")[0]
    assert failed.error_class == ToolErrorClass.USER_DENIED


async def test_confirmation_timeout(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, log = make_dispatcher(confirmation_timeout=0.2)
    result = await d.dispatch(write("w3"), session)
    assert result.error_class == ToolErrorClass.CONFIRMATION_TIMEOUT
    assert "No confirmation received within 0.2s" in result.text
    assert not (workspace / "out.txt").exists()
    assert log.types("w3") == [
        "tool.confirmation_requested",
        "tool.confirmation_resolved",
        "tool.failed",
    ]
    rid = log.of("tool.confirmation_requested")[0].request_id
    # a late answer learns the outcome and changes nothing
    assert await d.resolve_confirmation(rid, "allow") == "timeout"
    assert not (workspace / "out.txt").exists()


async def test_first_write_wins(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("w4"), session))
    ev = await asyncio.wait_for(log.requested.get(), 5)
    assert ev.request_id
    first = await d.resolve_confirmation(ev.request_id, "deny", reason="no", decided_by="bob")
    second = await d.resolve_confirmation(ev.request_id, "allow", decided_by="carol")
    assert first == "deny" and second == "deny"
    result = await task
    assert result.error_class == ToolErrorClass.USER_DENIED
    assert len(log.of("tool.confirmation_resolved")) == 1


async def test_resolve_errors(make_dispatcher: Any) -> None:
    d, _ = make_dispatcher()
    with pytest.raises(KeyError):
        await d.resolve_confirmation("nope", "allow")
    with pytest.raises(ValueError, match="decision must be one of"):
        await d.resolve_confirmation("nope", "maybe")
    with pytest.raises(ValueError, match="edited_input"):
        await d.resolve_confirmation("nope", "allow_with_edits")


async def test_allow_with_edits_revalidates(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("w5"), session))
    await answer_next(
        d, log, "allow_with_edits", edited_input={"path": "edited.txt", "content": "edited\n"}
    )
    result = await task
    assert not result.is_error
    assert (workspace / "edited.txt").read_text() == "edited\n"
    assert not (workspace / "out.txt").exists()
    assert "approved with edits" in log.of("tool.called")[0].data["rule"]
    # edits that escape the workspace are refused
    task = asyncio.create_task(d.dispatch(write("w6"), session))
    await answer_next(
        d, log, "allow_with_edits", edited_input={"path": "../escape.txt", "content": "x"}
    )
    result = await task
    assert result.error_class == ToolErrorClass.PERMISSION_DENIED
    assert not (workspace.parent / "escape.txt").exists()


async def test_prompt_once_remembers_for_session(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher({"default": {"WRITE": "prompt_once"}})
    task = asyncio.create_task(d.dispatch(write("a"), session))
    await answer_next(d, log, "allow")
    assert not (await task).is_error
    assert not (await d.dispatch(write("b", "b.txt"), session)).is_error
    assert len(log.of("tool.confirmation_requested")) == 1
    other = session.model_copy(update={"session_id": "other"})
    task = asyncio.create_task(d.dispatch(write("c", "c.txt"), other))
    await answer_next(d, log, "allow")
    await task
    assert len(log.of("tool.confirmation_requested")) == 2


async def test_sync_and_async_callbacks_and_unsubscribe(
    make_dispatcher: Any, session: Session
) -> None:
    d, _ = make_dispatcher()
    seen_sync: list[str] = []
    seen_async: list[str] = []

    async def acb(e: ToolEvent) -> None:
        await asyncio.sleep(0)
        seen_async.append(e.type)

    def broken(e: ToolEvent) -> None:
        raise RuntimeError("callback bug")

    unsub = d.on_event(lambda e: seen_sync.append(e.type))
    d.on_event(acb)
    d.on_event(broken)
    call = ToolUseBlock(id="r", name="read_file", input={"path": "README.md"})
    assert not (await d.dispatch(call, session)).is_error
    assert seen_sync == seen_async == ["tool.called", "tool.completed"]
    unsub()
    await d.dispatch(call, session)
    assert len(seen_sync) == 2 and len(seen_async) == 4


async def test_event_fields(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher()
    await d.dispatch(ToolUseBlock(id="r", name="read_file", input={"path": "README.md"}), session)
    called = log.of("tool.called")[0]
    assert (called.session_id, called.turn_id, called.tool_use_id, called.tool_name) == (
        "sess-1",
        "turn-1",
        "r",
        "read_file",
    )
    assert called.side_effects == SideEffects.READ and called.at.tzinfo is not None


def counting_tool(state: dict[str, int]) -> type:
    definition = ToolDefinition(
        name="slow",
        description="slow",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        side_effects=SideEffects.NONE,
    )

    class Slow:
        def __init__(self) -> None:
            self.definition = definition

        async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            await asyncio.sleep(0.1 + (5 - input["n"]) * 0.02)
            state["now"] -= 1
            return ToolOutput(content=[TextBlock(text=str(input["n"]))])

        async def cancel(self) -> bool:
            return False

    return Slow


async def test_dispatch_all_order_and_cap(make_dispatcher: Any, session: Session) -> None:
    d, _ = make_dispatcher(concurrency=2)
    state = {"now": 0, "peak": 0}
    d.register(counting_tool(state))
    calls = [ToolUseBlock(id=f"c{i}", name="slow", input={"n": i}) for i in range(6)]
    t0 = time.monotonic()
    results = await d.dispatch_all(calls, session)
    assert [r.tool_use_id for r in results] == [c.id for c in calls]
    assert [r.text for r in results] == [str(i) for i in range(6)]
    assert state["peak"] == 2
    assert time.monotonic() - t0 >= 0.3


async def test_dispatch_all_default_cap_is_four(make_dispatcher: Any, session: Session) -> None:
    d, _ = make_dispatcher()
    state = {"now": 0, "peak": 0}
    d.register(counting_tool(state))
    await d.dispatch_all(
        [ToolUseBlock(id=f"c{i}", name="slow", input={"n": 1}) for i in range(8)], session
    )
    assert state["peak"] == 4


async def test_cancel_session_cancels_pending_confirmation(
    make_dispatcher: Any, session: Session
) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("p"), session))
    await asyncio.wait_for(log.requested.get(), 5)
    assert await d.cancel_session_tools(session.session_id) == 1
    result = await task
    assert result.error_class == ToolErrorClass.CANCELLED
    assert d.pending_confirmations() == []
    assert await d.cancel_session_tools(session.session_id) == 0


async def test_cancel_session_only_cancels_that_session(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, _ = make_dispatcher({"per_tool": {"shell": "auto"}})
    other = session.model_copy(update={"session_id": "other"})
    a = asyncio.create_task(
        d.dispatch(
            ToolUseBlock(id="a", name="shell",
                         input={"command": "echo a; touch a.ready; sleep 30"}),
            session,
        )
    )
    b = asyncio.create_task(
        d.dispatch(
            ToolUseBlock(id="b", name="shell",
                         input={"command": "touch b.ready; sleep 0.8; echo b"}),
            other,
        )
    )
    await until_exists(workspace / "a.ready")
    await until_exists(workspace / "b.ready")
    await d.cancel_session_tools(session.session_id)
    ra = await asyncio.wait_for(a, 10)
    rb = await asyncio.wait_for(b, 10)
    assert ra.error_class == ToolErrorClass.CANCELLED and "a" in ra.text
    assert not rb.is_error and "b" in rb.text


async def test_dispatcher_never_raises_on_bad_tool_output(
    make_dispatcher: Any, session: Session
) -> None:
    definition = ToolDefinition(
        name="weird", description="", input_schema={"type": "object"}, side_effects=SideEffects.NONE
    )

    class Weird:
        def __init__(self) -> None:
            self.definition = definition

        async def execute(self, input: dict[str, Any], context: ToolContext) -> Any:
            return "not a ToolOutput"

        async def cancel(self) -> bool:
            return False

    d, _ = make_dispatcher()
    d.register(Weird)
    result = await d.dispatch(ToolUseBlock(id="x", name="weird", input={}), session)
    assert result.is_error and result.error_class == ToolErrorClass.EXECUTION_ERROR


def test_constructor_signature() -> None:
    d = ToolDispatcher()
    assert d.confirmation_timeout == 300.0 and d.concurrency == 4
    with pytest.raises(ValueError):
        ToolDispatcher(concurrency=0)


async def test_compound_shell_line_is_not_auto_approved(
    make_dispatcher: Any, session: Session, workspace: Path
) -> None:
    d, log = make_dispatcher(
        {"rules": [{"tool": "shell", "command": "git status", "mode": "auto"}]},
        confirmation_timeout=0.2,
    )
    result = await d.dispatch(
        ToolUseBlock(id="x", name="shell", input={"command": "echo ok; touch pwned"}), session
    )
    assert result.error_class == ToolErrorClass.CONFIRMATION_TIMEOUT
    assert not (workspace / "pwned").exists()
    sneaky = ToolUseBlock(id="y", name="shell", input={"command": "git status; touch pwned"})
    result = await d.dispatch(sneaky, session)
    assert result.error_class == ToolErrorClass.CONFIRMATION_TIMEOUT
    assert log.of("tool.confirmation_requested")[-1].data["rule"] == "default.EXECUTE=prompt"
    assert not (workspace / "pwned").exists()


async def test_worker_cannot_call_hidden_tool(make_dispatcher: Any, session: Session) -> None:
    definition = ToolDefinition(
        name="memory_add",
        description="",
        side_effects=SideEffects.NONE,
        input_schema={"type": "object"},
        hidden_from_workers=True,
    )

    class Memory:
        def __init__(self) -> None:
            self.definition = definition

        async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            return ToolOutput(content=[TextBlock(text="saved")])

        async def cancel(self) -> bool:
            return False

    d, _ = make_dispatcher()
    d.register(Memory)
    worker = session.model_copy(update={"kind": "worker"})
    call = ToolUseBlock(id="m", name="memory_add", input={})
    assert (await d.dispatch(call, session)).text == "saved"
    r = await d.dispatch(call, worker)
    assert r.error_class == ToolErrorClass.NOT_FOUND and "memory_add" not in r.text.split(":")[-1]


async def test_outer_cancellation_clears_pending(make_dispatcher: Any, session: Session) -> None:
    d, log = make_dispatcher()
    task = asyncio.create_task(d.dispatch(write("oc"), session))
    ev = await asyncio.wait_for(log.requested.get(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert d.pending_confirmations() == []
    assert ev.request_id and await d.resolve_confirmation(ev.request_id, "allow") == "cancelled"


def test_limits_from_settings() -> None:
    from parkgate import Limits
    from parkgate.settings import Settings

    s = Settings(
        default_timeout_seconds=5,
        execute_timeout_seconds=50,
        cancel_grace_seconds=2,
        max_input_bytes=10,
    )
    limits = Limits.from_settings(s, text_chars=10)
    assert (
        limits.default_timeout_seconds,
        limits.execute_timeout_seconds,
        limits.cancel_grace_seconds,
        limits.max_input_bytes,
        limits.text_chars,
    ) == (5, 50, 2, 10, 10)
