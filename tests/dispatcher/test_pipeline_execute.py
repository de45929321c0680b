"""execute: the run of a classified call (never re-classified): its events,
errors, time limits by class, cancellation and its grace, truncation for the
model, after-hooks, edits, raw opens and image blocks. classify is in
test_pipeline.py, whose tool factory and helpers these share."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from parkgate import (
    Deny,
    Execute,
    Limits,
    NeedsApproval,
    Session,
    SideEffects,
    TextBlock,
    ToolContext,
    ToolDefinition,
    ToolErrorClass,
    ToolExecutionError,
    ToolHook,
    ToolOutput,
    ToolUseBlock,
    input_hash,
)
from tests.dispatcher.test_pipeline import Recorder, make_pipeline, tool_class


async def test_execute_emits_called_then_completed(session: Session) -> None:
    p = make_pipeline()
    rec = Recorder()
    v = await p.classify(
        ToolUseBlock(id="1", name="read_file", input={"path": "README.md"}), session
    )
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared, emit=rec)
    assert rec.types == ["tool.called", "tool.completed"]
    assert all(e.side_effects == SideEffects.READ for e in rec.events)
    assert rec.events[0].data["rule"] == "default.READ=auto"
    assert len({e.event_id for e in rec.events}) == 2
    assert run.error_class is None and run.duration_ms >= 0 and run.started_at is not None


async def test_execute_never_reclassifies(session: Session) -> None:
    # A denied-by-policy call that was (somehow) approved still runs: execute trusts its input.
    p = make_pipeline(policy={"per_tool": {"write_file": "deny"}})
    v = await make_pipeline().classify(
        ToolUseBlock(id="1", name="write_file", input={"path": "n.txt", "content": "x"}), session
    )
    assert isinstance(v, NeedsApproval)
    run = await p.execute(v.prepared)
    assert run.error_class is None


async def test_unexpected_exception_is_generic_and_logged(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raise RuntimeError("secret internal detail /etc/shadow")

    p = make_pipeline(tool_class("boom", boom))
    rec = Recorder()
    v = await p.classify(ToolUseBlock(id="1", name="boom", input={}), session)
    assert isinstance(v, Execute)
    with caplog.at_level(logging.ERROR):
        run = await p.execute(v.prepared, emit=rec)
    assert run.error_class == ToolErrorClass.EXECUTION_ERROR
    assert "secret" not in run.result.text and "internal error" in run.result.text
    assert rec.types == ["tool.called", "tool.failed"]
    assert rec.events[1].error_class == ToolErrorClass.EXECUTION_ERROR
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].exc_info is not None
    assert "secret internal detail" in str(errors[0].exc_info[1])


async def test_tool_error_message_is_shown(session: Session) -> None:
    async def fail(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        raise ToolExecutionError("HTTP 500: connection refused")

    p = make_pipeline(tool_class("fail", fail))
    v = await p.classify(ToolUseBlock(id="1", name="fail", input={}), session)
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared)
    assert run.result.is_error and run.result.text == "HTTP 500: connection refused"


async def test_timeout(session: Session) -> None:
    async def slow(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(30)
        return ToolOutput()

    p = make_pipeline(
        tool_class("slow", slow, timeout_seconds=0.2), limits=Limits(cancel_grace_seconds=0.2)
    )
    rec = Recorder()
    v = await p.classify(ToolUseBlock(id="1", name="slow", input={}), session)
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared, emit=rec)
    assert run.error_class == ToolErrorClass.TIMEOUT
    assert "exceeded 0.2s wall time limit" in run.result.text
    assert rec.events[-1].error_class == ToolErrorClass.TIMEOUT


def test_timeouts_by_class() -> None:
    p = make_pipeline()
    assert (
        p.timeout_for(
            ToolDefinition(
                name="a", description="", input_schema={}, side_effects=SideEffects.WRITE
            )
        )
        == 60
    )
    assert (
        p.timeout_for(
            ToolDefinition(
                name="a", description="", input_schema={}, side_effects=SideEffects.NETWORK
            )
        )
        == 600
    )
    assert (
        p.timeout_for(
            ToolDefinition(
                name="a",
                description="",
                input_schema={},
                side_effects=SideEffects.EXECUTE,
                timeout_seconds=5,
            )
        )
        == 5
    )


@pytest.mark.parametrize("timeout", [None, 0.5, 7])
@pytest.mark.parametrize("side_effects", [SideEffects.READ, SideEffects.EXECUTE])
def test_the_plan_and_the_pipeline_agree_on_timeouts(
    timeout: float | None, side_effects: SideEffects
) -> None:
    from parkgate.activities.plan import tool_timeout
    from parkgate.settings import Settings

    definition = ToolDefinition(
        name="a",
        description="",
        input_schema={},
        side_effects=side_effects,
        timeout_seconds=timeout,
    )
    settings = Settings()
    pipeline = make_pipeline(limits=Limits.from_settings(settings))
    assert tool_timeout(definition, settings) == pipeline.timeout_for(definition)


def test_a_zero_tool_timeout_is_rejected() -> None:
    # 0 used to mean "class default" for the workflow's plan but "no time at all" for
    # the pipeline; a declared timeout must now be positive, None means the default.
    with pytest.raises(ValidationError, match="timeout_seconds"):
        ToolDefinition(
            name="a",
            description="",
            input_schema={},
            side_effects=SideEffects.READ,
            timeout_seconds=0,
        )
    assert (
        ToolDefinition(
            name="a", description="", input_schema={}, side_effects=SideEffects.READ
        ).timeout_seconds
        is None
    )


async def test_cancellation_with_cooperative_tool(session: Session) -> None:
    async def polls(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        for _ in range(300):
            if ctx.cancel_event.is_set():
                return ToolOutput(content=[TextBlock(text="half done")], success=False)
            await asyncio.sleep(0.01)
        return ToolOutput(content=[TextBlock(text="done")])

    p = make_pipeline(tool_class("polls", polls))
    rec = Recorder()
    v = await p.classify(ToolUseBlock(id="1", name="polls", input={}), session)
    assert isinstance(v, Execute)
    ev = asyncio.Event()
    task = asyncio.create_task(p.execute(v.prepared, cancel_event=ev, emit=rec))
    await asyncio.sleep(0.05)
    ev.set()
    run = await task
    assert run.error_class == ToolErrorClass.CANCELLED
    assert "half done" in run.result.text
    assert rec.events[-1].data["partial_output"] == "half done"


async def test_a_tool_that_finished_its_work_despite_the_cancel_succeeded(
    session: Session,
) -> None:
    """A cancel that arrives while the tool is committing its effect (a write
    that completes anyway) must not be recorded as `cancelled`: the effect stands.
    Seen as a human-vs-agent race: a call reported cancelled whose file existed."""
    started = asyncio.Event()

    async def commits(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        started.set()
        await ctx.cancel_event.wait()  # the cancel arrives mid-commit...
        await asyncio.sleep(0.05)  # ...and the commit completes regardless
        return ToolOutput(content=[TextBlock(text="written")])

    p = make_pipeline(tool_class("commits", commits))
    v = await p.classify(ToolUseBlock(id="1", name="commits", input={}), session)
    assert isinstance(v, Execute)
    ev = asyncio.Event()
    task = asyncio.create_task(p.execute(v.prepared, cancel_event=ev))
    await started.wait()
    ev.set()
    run = await task
    assert run.error_class is None and not run.result.is_error
    assert "written" in run.result.text


async def test_cancel_is_called_even_when_the_tool_already_stopped(session: Session) -> None:
    """Spec §7 / worked example 4: cancel_event AND tool.cancel(), in every case."""
    seen: list[Any] = []

    async def polls(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        seen.append(self)
        await ctx.cancel_event.wait()
        return ToolOutput(content=[TextBlock(text="stopped on the event")], success=False)

    p = make_pipeline(tool_class("polls2", polls))
    v = await p.classify(ToolUseBlock(id="1", name="polls2", input={}), session)
    assert isinstance(v, Execute)
    ev = asyncio.Event()
    task = asyncio.create_task(p.execute(v.prepared, cancel_event=ev))
    while not seen:
        await asyncio.sleep(0.01)
    # The tool stops on the event in the same loop turn the dispatcher sees it.
    ev.set()
    run = await task
    assert run.error_class == ToolErrorClass.CANCELLED
    assert seen[0].cancelled is True

    # Cancelled before it started: cancel() is still called (nothing to stop).
    created: list[Any] = []
    original = p.registry.create

    def spy(name: str) -> Any:
        tool = original(name)
        created.append(tool)
        return tool

    p.registry.create = spy  # type: ignore[method-assign]
    early = asyncio.Event()
    early.set()
    run = await p.execute(v.prepared, cancel_event=early)
    assert run.error_class == ToolErrorClass.CANCELLED
    assert created and created[0].cancelled is True


async def test_cancellation_gives_up_after_grace(session: Session, caplog: Any) -> None:
    async def stubborn(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(0.01)
                raise

    p = make_pipeline(tool_class("stubborn", stubborn), limits=Limits(cancel_grace_seconds=0.2))
    v = await p.classify(ToolUseBlock(id="1", name="stubborn", input={}), session)
    assert isinstance(v, Execute)
    ev = asyncio.Event()
    ev.set()
    run = await p.execute(v.prepared, cancel_event=ev)
    assert run.error_class == ToolErrorClass.CANCELLED  # cancelled before start
    ev2 = asyncio.Event()
    task = asyncio.create_task(p.execute(v.prepared, cancel_event=ev2))
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING):
        ev2.set()
        run = await task
    assert run.error_class == ToolErrorClass.CANCELLED and run.metadata["abandoned"] is True
    assert any("abandoning" in r.getMessage() for r in caplog.records)


async def test_truncation_for_the_model_keeps_full_output(session: Session) -> None:
    async def big(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=[TextBlock(text="y" * 500)])

    p = make_pipeline(tool_class("big", big), limits=Limits(text_chars=100))
    v = await p.classify(ToolUseBlock(id="1", name="big", input={}), session)
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared)
    assert run.result.text == "y" * 100 + "\n[truncated: 400 more characters]"
    assert run.output is not None and run.output.content[0].text == "y" * 500  # type: ignore[union-attr]


async def test_after_hook_can_replace_the_run(session: Session) -> None:
    class Redact(ToolHook):
        def after(self, prepared: Any, run: Any) -> Any:
            text = run.result.text.replace("Foo", "***")
            return run.model_copy(
                update={"result": run.result.model_copy(update={"content": [TextBlock(text=text)]})}
            )

    p = make_pipeline(hooks=[Redact()])
    v = await p.classify(
        ToolUseBlock(id="1", name="read_file", input={"path": "README.md"}), session
    )
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared)
    assert run.result.text.startswith("# Project ***")


async def test_revalidate_edits(session: Session) -> None:
    p = make_pipeline()
    v = await p.classify(
        ToolUseBlock(id="1", name="write_file", input={"path": "a.txt", "content": "1"}), session
    )
    assert isinstance(v, NeedsApproval)
    edited = p.revalidate(v.prepared, {"path": "b.txt", "content": "2"})
    assert not isinstance(edited, Deny)
    assert edited.input_hash == input_hash("write_file", {"path": "b.txt", "content": "2"})
    assert edited.input_hash != v.prepared.input_hash
    bad = p.revalidate(v.prepared, {"path": "../b.txt", "content": "2"})
    assert isinstance(bad, Deny) and bad.error_class == ToolErrorClass.PERMISSION_DENIED
    bad = p.revalidate(v.prepared, {"path": "b.txt"})
    assert isinstance(bad, Deny) and bad.error_class == ToolErrorClass.VALIDATION_ERROR


async def test_raw_open_is_permitted_and_logged(
    session: Session, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = workspace / "README.md"

    async def raw(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        with open(target) as fh:
            return ToolOutput(content=[TextBlock(text=fh.read())])

    p = make_pipeline(tool_class("raw", raw, SideEffects.EXECUTE))
    v = await p.classify(ToolUseBlock(id="1", name="raw", input={}), session)
    assert isinstance(v, NeedsApproval)
    with caplog.at_level(logging.DEBUG, logger="parkgate.tools.open"):
        run = await p.execute(v.prepared)
    assert run.error_class is None and "Project Foo" in run.result.text
    assert any("raw" in r.getMessage() and "README.md" in r.getMessage() for r in caplog.records)


async def test_image_blocks_pass_through(session: Session) -> None:
    from parkgate import ImageBlock, ImageSource

    async def pic(self: Any, input: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=[ImageBlock(source=ImageSource(data="aGk="))])

    p = make_pipeline(tool_class("pic", pic))
    v = await p.classify(ToolUseBlock(id="1", name="pic", input={}), session)
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared)
    assert isinstance(run.result.content[0], ImageBlock)
    assert run.result.content[0].source.data == "aGk="


async def test_sync_execute_that_raises_is_contained(session: Session) -> None:
    definition = ToolDefinition(
        name="syncy", description="", input_schema={"type": "object"}, side_effects=SideEffects.NONE
    )

    class Syncy:
        def __init__(self) -> None:
            self.definition = definition

        def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            raise ValueError("sync boom")

        async def cancel(self) -> bool:
            return False

    p = make_pipeline(Syncy)
    rec = Recorder()
    v = await p.classify(ToolUseBlock(id="1", name="syncy", input={}), session)
    assert isinstance(v, Execute)
    run = await p.execute(v.prepared, emit=rec)
    assert run.error_class == ToolErrorClass.EXECUTION_ERROR and "sync boom" not in run.result.text
    assert rec.types == ["tool.called", "tool.failed"]
