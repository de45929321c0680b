"""classify: the pure decision (registry, schema, workspace scope, policy, shell
guard, input size, hooks, budget precheck). execute is in test_pipeline_execute.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    ToolContext,
    ToolDefinition,
    ToolErrorClass,
    ToolEvent,
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
