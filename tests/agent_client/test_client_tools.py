"""What a gated function declares and how released JSON comes back to it (pure:
no server; the gate's calls run against the real stack in test_gate.py)."""

from __future__ import annotations

from datetime import date
from typing import Literal

import pytest
from pydantic import BaseModel

from parkgate.agent_client.client_tools import (
    FunctionSignature,
    content_of,
    definition,
    description_of,
    local_result,
    side_effects_for,
    subset_schema,
)
from parkgate.models import SideEffects, TextBlock
from parkgate.schema import check_schema_subset


class Line(BaseModel):
    sku: str
    qty: int = 1


class Node(BaseModel):
    children: list[Node] = []


def order(lines: list[Line], note: str | None = None, when: date | None = None,
          mode: Literal["normal", "rush"] = "normal") -> str:
    """Place an order.

    Lines are merged by sku."""
    return "ok"


def test_a_functions_schema_is_in_parkgates_subset_with_its_docstring() -> None:
    sig = FunctionSignature(order)
    tool = definition("order", description_of(order), sig.schema(), "write")
    assert check_schema_subset(tool.input_schema) == []
    schema = tool.input_schema
    assert schema["required"] == ["lines"] and schema["additionalProperties"] is False
    assert schema["properties"]["lines"]["items"]["properties"]["sku"] == {"type": "string"}
    assert schema["properties"]["note"]["type"] == ["string", "null"]
    assert schema["properties"]["mode"]["enum"] == ["normal", "rush"]
    assert tool.description == "Place an order.\n\nLines are merged by sku."
    assert tool.side_effects is SideEffects.WRITE
    assert tool.wire()["side_effects"] == "write"


def test_a_python_call_becomes_json_input_and_released_json_becomes_arguments() -> None:
    sig = FunctionSignature(order)
    assert sig.to_input(([Line(sku="a")],), {"when": date(2026, 1, 2)}) == {
        "lines": [{"sku": "a", "qty": 1}], "when": "2026-01-02"}
    # An approver's edit is validated like the model's input, then typed again.
    kwargs = sig.to_kwargs({"lines": [{"sku": "b", "qty": 3}], "when": "2026-02-03"})
    assert kwargs["lines"] == [Line(sku="b", qty=3)] and kwargs["when"] == date(2026, 2, 3)
    assert kwargs["note"] is None and kwargs["mode"] == "normal"
    with pytest.raises(ValueError):
        sig.to_kwargs({"lines": [], "surprise": 1})


def test_varargs_and_unsupported_schemas_are_refused_at_declaration() -> None:
    def loose(*args: int) -> None: ...

    with pytest.raises(TypeError, match="named parameters"):
        FunctionSignature(loose)

    def tree(root: Node) -> None: ...

    with pytest.raises(ValueError, match="recursive"):
        definition("tree", "t", FunctionSignature(tree).schema(), "none")
    with pytest.raises(ValueError, match="not supported"):
        definition("either", "e", {"type": "object", "properties": {"x": {"anyOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}},
            {"type": "string"}]}}}, "none")


def test_framework_schemas_are_brought_into_the_subset() -> None:
    strict = {  # what OpenAI's strict function schema looks like
        "type": "object", "additionalProperties": False, "required": ["path", "mode"],
        "properties": {"path": {"type": "string", "title": "Path"},
                       "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}]}},
        "$defs": {"Mode": {"type": "string", "enum": ["a", "w"]}},
    }
    out = subset_schema(strict)
    assert check_schema_subset(out) == []
    assert out["properties"]["mode"] == {"enum": ["a", "w"], "type": ["string", "null"]}
    assert "title" not in out["properties"]["path"]


def test_return_values_become_recorded_content() -> None:
    assert content_of("done") == "done"
    assert content_of({"n": 1}) == '{"n": 1}'
    assert content_of(None) == ""
    assert content_of([TextBlock(text="a")]) == [{"type": "text", "text": "a"}]
    assert content_of(object()).startswith("<object")
    block = local_result("t1", [{"type": "text", "text": "x"}], False)
    assert block.text == "x" and not block.is_error


def test_side_effects_per_tool_must_name_every_tool() -> None:
    assert side_effects_for("a", "read") is SideEffects.READ
    assert side_effects_for("a", {"a": "execute"}) is SideEffects.EXECUTE
    with pytest.raises(ValueError, match="'b'"):
        side_effects_for("b", {"a": "execute"})
