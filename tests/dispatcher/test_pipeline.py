"""classify (pure decision) and execute (run, never re-classify)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from parkgate import (
    CallBudget,
    ConfirmationPolicy,
    Deny,
    Execute,
    HookHalt,
    Limits,
    NeedsApproval,
    Pipeline,
    Session,
    SideEffects,
    TextBlock,
    ToolContext,
    ToolDefinition,
    ToolErrorClass,
    ToolEvent,
    ToolExecutionError,
    ToolHook,
    ToolOutput,
    ToolRegistry,
    ToolUseBlock,
    builtin_tools,
    classify,
    execute,
    input_hash,
)


def tool_class(
    name: str, run: Any, side_effects: SideEffects = SideEffects.NONE, **defn: Any
) -> type:
    definition = ToolDefinition(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
        side_effects=side_effects,
        **defn,
    )

    class T:
        def __init__(self) -> None:
            self.definition = definition
            self.cancelled = False

        async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            return await run(self, input, context)

        async def cancel(self) -> bool:
            self.cancelled = True
            return True

    return T


def make_pipeline(*extra: type, policy: dict[str, Any] | None = None, **kw: Any) -> Pipeline:
    registry = ToolRegistry()
    for f in builtin_tools():
        registry.register(f)
    for f in extra:
        registry.register(f)
    return Pipeline(registry, ConfirmationPolicy.from_mapping(policy or {}), **kw)


class Recorder:
    def __init__(self) -> None:
        self.events: list[ToolEvent] = []

    async def __call__(self, event: ToolEvent) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]


async def test_classify_outcomes(session: Session) -> None:
    p = make_pipeline()
    v = await p.classify(
        ToolUseBlock(id="1", name="read_file", input={"path": "README.md"}), session
    )
    assert isinstance(v, Execute) and v.prepared.rule == "default.READ=auto"
    assert v.prepared.input_hash == input_hash("read_file", {"path": "README.md"})
    v = await p.classify(ToolUseBlock(id="2", name="nope", input={}), session)
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.NOT_FOUND
    assert v.result.text.startswith("Tool 'nope' not found. Available: [list_dir, patch_file,")
    v = await p.classify(ToolUseBlock(id="3", name="read_file", input={"path": 3}), session)
    assert isinstance(v, Deny) and v.event_type == "tool.input_invalid"
    assert "$.path: 3 is not of type 'string'" in v.result.text
    v = await p.classify(ToolUseBlock(id="4", name="shell", input={"command": "ls"}), session)
    assert isinstance(v, NeedsApproval)
    assert v.info.rule == "default.EXECUTE=prompt" and v.info.side_effects == SideEffects.EXECUTE
    assert len(v.info.request_id) == 32


async def test_classify_is_pure(session: Session, workspace: Path) -> None:
    p = make_pipeline()
    before = sorted(str(x) for x in workspace.rglob("*"))  # noqa: ASYNC240
    call = ToolUseBlock(
        id="w",
        name="write_file",
        input={"path": "src/auth.ts", "content": "export const token = 'new';\n"},
    )
    v = await p.classify(call, session)
    assert isinstance(v, NeedsApproval)
    assert v.info.projected_impact == ["will modify src/auth.ts"]
    assert v.info.diff is not None
    assert "-export const token = 'old';" in v.info.diff
    assert "+export const token = 'new';" in v.info.diff
    assert v.info.files == ["src/auth.ts"]
    assert sorted(str(x) for x in workspace.rglob("*")) == before  # noqa: ASYNC240
    assert (workspace / "src/auth.ts").read_text() == "export const token = 'old';\n"


async def test_patch_preview_diff_and_failure_preview(session: Session) -> None:
    p = make_pipeline()
    v = await p.classify(
        ToolUseBlock(
            id="p", name="patch_file", input={"path": "src/auth.ts", "old": "'old'", "new": "'new'"}
        ),
        session,
    )
    assert isinstance(v, NeedsApproval)
    assert "+export const token = 'new';" in (v.info.diff or "")
    v = await p.classify(
        ToolUseBlock(
            id="p2", name="patch_file", input={"path": "src/auth.ts", "old": "absent", "new": "x"}
        ),
        session,
    )
    assert isinstance(v, NeedsApproval)
    assert v.info.projected_impact[0].startswith("will fail:")


async def test_workspace_scope_is_checked_before_policy(session: Session) -> None:
    p = make_pipeline(policy={"per_tool": {"write_file": "auto"}})
    v = await p.classify(
        ToolUseBlock(id="1", name="write_file", input={"path": "../x", "content": ""}), session
    )
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.PERMISSION_DENIED
    assert v.rule == "workspace" and "escapes workspace boundary" in v.result.text


async def test_missing_workspace_is_permission_denied(tmp_path: Path) -> None:
    p = make_pipeline()
    s = Session(session_id="s", turn_id="t", workspace_path=str(tmp_path / "gone"))
    v = await p.classify(ToolUseBlock(id="1", name="read_file", input={"path": "a"}), s)
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.PERMISSION_DENIED


async def test_policy_deny_names_rule(session: Session) -> None:
    p = make_pipeline(policy={"per_tool": {"shell": "deny"}})
    v = await p.classify(ToolUseBlock(id="1", name="shell", input={"command": "ls"}), session)
    assert isinstance(v, Deny) and v.rule == "deny:per_tool.shell"
    assert v.result.text == (
        "Permission denied: tool 'shell' is disabled by policy (rule: deny:per_tool.shell)"
    )


async def test_shell_guard_is_a_validation_error_in_classify(session: Session) -> None:
    p = make_pipeline(limits=Limits(shell_max_command_chars=10))
    v = await p.classify(
        ToolUseBlock(id="1", name="shell", input={"command": "echo " * 5}), session
    )
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.VALIDATION_ERROR
    assert "over the 10-character limit" in v.result.text
    v = await p.classify(ToolUseBlock(id="2", name="shell", input={"command": "a\x00b"}), session)
    assert isinstance(v, Deny) and "NUL" in v.result.text
    v = await p.classify(
        ToolUseBlock(id="3", name="shell", input={"command": "echo\ntouch x"}), session
    )
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.VALIDATION_ERROR
    assert "multiline commands are rejected" in v.result.text


async def test_input_size_cap(session: Session) -> None:
    p = make_pipeline(limits=Limits(max_input_bytes=100))
    v = await p.classify(
        ToolUseBlock(id="1", name="write_file", input={"path": "a", "content": "x" * 200}), session
    )
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.VALIDATION_ERROR
    assert "over the 100-byte limit" in v.result.text


async def test_before_hooks_rewrite_and_halt(session: Session) -> None:
    class Rewrite(ToolHook):
        def before(self, call: ToolUseBlock, s: Session, d: ToolDefinition) -> Any:
            if call.name == "read_file":
                return ToolUseBlock(id=call.id, name=call.name, input={"path": "src/auth.ts"})
            return None

    class Block(ToolHook):
        name = "no-list"

        async def before(self, call: ToolUseBlock, s: Session, d: ToolDefinition) -> Any:
            return HookHalt(message="listing is off today") if call.name == "list_dir" else None

    class Escape(ToolHook):
        def before(self, call: ToolUseBlock, s: Session, d: ToolDefinition) -> Any:
            if call.name == "write_file":
                return ToolUseBlock(
                    id=call.id, name=call.name, input={"path": "../evil", "content": ""}
                )
            return None

    p = make_pipeline(hooks=[Rewrite(), Block(), Escape()])
    v = await p.classify(
        ToolUseBlock(id="1", name="read_file", input={"path": "README.md"}), session
    )
    assert isinstance(v, Execute) and v.prepared.call.input == {"path": "src/auth.ts"}
    run = await p.execute(v.prepared)
    assert "token" in run.result.text
    v = await p.classify(ToolUseBlock(id="2", name="list_dir", input={}), session)
    assert isinstance(v, Deny) and v.rule == "hook:no-list"
    assert v.result.text == "listing is off today"
    v = await p.classify(
        ToolUseBlock(id="3", name="write_file", input={"path": "ok", "content": ""}), session
    )
    assert isinstance(v, Deny) and v.error_class == ToolErrorClass.PERMISSION_DENIED


async def test_budget_precheck_and_record(session: Session) -> None:
    p = make_pipeline(budget=CallBudget(max_calls=1))
    call = ToolUseBlock(id="1", name="read_file", input={"path": "README.md"})
    v = await classify(call, session, p)
    assert isinstance(v, Execute)
    await execute(v.prepared, p)
    v = await classify(call, session, p)
    assert isinstance(v, Deny) and v.rule == "budget" and "Budget exceeded" in v.result.text


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
