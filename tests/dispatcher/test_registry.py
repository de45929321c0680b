"""Registration: factories, name conflicts, schema subset, visibility, exports."""

from __future__ import annotations

from typing import Any

import pytest

from parkgate import (
    Session,
    SideEffects,
    TextBlock,
    ToolContext,
    ToolDefinition,
    ToolDispatcher,
    ToolNameConflictError,
    ToolOutput,
    ToolRegistrationError,
    ToolRegistry,
    builtin_tools,
)


def make_tool(name: str = "echo", schema: dict[str, Any] | None = None, **defn: Any) -> type:
    definition = ToolDefinition(
        name=name,
        description="Echo the text back.",
        input_schema=schema
        or {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        side_effects=defn.pop("side_effects", SideEffects.NONE),
        **defn,
    )

    class Echo:
        def __init__(self) -> None:
            self.definition = definition

        async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
            return ToolOutput(content=[TextBlock(text=input["text"])])

        async def cancel(self) -> bool:
            return False

    return Echo


def test_builtin_tools_are_the_five_factories() -> None:
    registry = ToolRegistry()
    for factory in builtin_tools():
        registry.register(factory)
    defs = {d.name: d.side_effects for d in registry.definitions()}
    assert defs == {
        "read_file": SideEffects.READ,
        "write_file": SideEffects.WRITE,
        "patch_file": SideEffects.WRITE,
        "list_dir": SideEffects.READ,
        "shell": SideEffects.EXECUTE,
    }


def test_factory_produces_distinct_instances() -> None:
    registry = ToolRegistry()
    registry.register(make_tool())
    assert registry.create("echo") is not registry.create("echo")


def test_singleton_factory_is_rejected() -> None:
    instance = make_tool()()
    with pytest.raises(ToolRegistrationError, match="fresh instance"):
        ToolRegistry().register(lambda: instance)


def test_tool_instance_instead_of_factory_is_rejected() -> None:
    with pytest.raises(ToolRegistrationError, match="factory"):
        ToolRegistry().register(make_tool()())  # type: ignore[arg-type]


def test_name_conflict() -> None:
    registry = ToolRegistry()
    registry.register(make_tool())
    with pytest.raises(ToolNameConflictError, match="'echo' is already registered"):
        registry.register(make_tool())


def test_builtin_name_cannot_be_overridden() -> None:
    d = ToolDispatcher(tools=builtin_tools())
    with pytest.raises(ToolNameConflictError):
        d.register(make_tool("shell"))


def test_forbidden_schema_is_named_with_json_path() -> None:
    schema = {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}]}}}
    with pytest.raises(ToolRegistrationError) as info:
        ToolRegistry().register(make_tool(schema=schema))
    assert "$.properties.x.anyOf" in str(info.value)
    assert "'echo'" in str(info.value)


def test_additional_properties_schema_is_named() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "string"}}
    with pytest.raises(ToolRegistrationError, match=r"\$\.additionalProperties"):
        ToolRegistry().register(make_tool(schema=schema))


def test_missing_side_effects_is_rejected() -> None:
    tool = make_tool()
    bad = ToolDefinition.model_construct(
        name="bad",
        description="d",
        input_schema={"type": "object"},
        side_effects=None,
        path_fields=[],
        composed_of=None,
        atomic=False,
    )

    class Bad(tool):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.definition = bad

    with pytest.raises(ToolRegistrationError, match="side_effects"):
        ToolRegistry().register(Bad)


def test_path_field_must_be_string_property() -> None:
    with pytest.raises(ToolRegistrationError, match="path field 'target'"):
        ToolRegistry().register(make_tool(path_fields=["target"]))


def test_factory_that_raises_is_a_registration_error() -> None:
    def broken() -> Any:
        raise RuntimeError("boom")

    with pytest.raises(ToolRegistrationError, match="RuntimeError: boom"):
        ToolRegistry().register(broken)


def test_unregister_and_unknown() -> None:
    registry = ToolRegistry()
    registry.register(make_tool())
    registry.unregister("echo")
    assert registry.get("echo") is None
    with pytest.raises(KeyError):
        registry.unregister("echo")


def test_worker_sessions_do_not_see_hidden_tools() -> None:
    d = ToolDispatcher()
    d.register(make_tool("memory_add", hidden_from_workers=True))
    d.register(make_tool("echo"))
    main = Session(session_id="s", turn_id="t", workspace_path="/", kind="main")
    worker = Session(session_id="s", turn_id="t", workspace_path="/", kind="worker")
    assert [x.name for x in d.get_definitions_for_session(main)] == ["echo", "memory_add"]
    assert [x.name for x in d.get_definitions_for_session(worker)] == ["echo"]


def test_definitions_export_to_provider_shapes() -> None:
    definition = ToolRegistry().register(make_tool())
    openai = definition.to_openai()
    assert openai["type"] == "function"
    assert openai["function"]["name"] == "echo"
    assert openai["function"]["parameters"]["properties"]["text"] == {"type": "string"}
    anthropic = definition.to_anthropic()
    assert anthropic == {
        "name": "echo",
        "description": "Echo the text back.",
        "input_schema": definition.input_schema,
    }
