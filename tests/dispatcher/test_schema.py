"""JSON Schema subset checks (registration) and Draft7 input validation."""

from __future__ import annotations

import pytest

from parkgate.schema import check_schema_subset, validate_input


def obj(**props: object) -> dict[str, object]:
    return {"type": "object", "properties": props}


def test_plain_subset_schema_is_accepted() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "p", "format": "uri"},
            "n": {"type": "integer"},
            "mode": {"enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "nested": {
                "type": "object",
                "properties": {"x": {"type": "null"}},
                "additionalProperties": False,
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    assert check_schema_subset(schema) == []


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        (obj(a={"$ref": "#/x"}), "$.properties.a.$ref"),
        (obj(a={"oneOf": [{"type": "string"}]}), "$.properties.a.oneOf"),
        (obj(a={"anyOf": [{"type": "string"}]}), "$.properties.a.anyOf"),
        (obj(a={"allOf": [{"type": "string"}]}), "$.properties.a.allOf"),
        (obj(a={"not": {"type": "string"}}), "$.properties.a.not"),
        (obj(a={"if": {"type": "string"}, "then": {}, "else": {}}), "$.properties.a.if"),
        (
            obj(a={"type": "object", "patternProperties": {"^x": {}}}),
            "$.properties.a.patternProperties",
        ),
        (
            obj(a={"type": "object", "additionalProperties": {"type": "string"}}),
            "$.properties.a.additionalProperties",
        ),
        (obj(a={"type": "array", "items": {"anyOf": []}}), "$.properties.a.items.anyOf"),
        ({"type": "object", "oneOf": []}, "$.oneOf"),
    ],
)
def test_forbidden_constructs_are_named_with_their_json_path(schema: object, path: str) -> None:
    errors = check_schema_subset(schema)
    assert any(e.startswith(path + ":") for e in errors), errors


def test_property_named_like_a_keyword_is_fine() -> None:
    assert check_schema_subset(obj(**{"not": {"type": "string"}, "if": {"type": "string"}})) == []


def test_top_level_must_be_object() -> None:
    assert check_schema_subset({"type": "string"})[0].startswith("$.type")
    assert check_schema_subset([1])[0].startswith("$:")


def test_invalid_json_schema_is_reported() -> None:
    errors = check_schema_subset({"type": "object", "properties": {"a": {"type": "strang"}}})
    assert any("invalid JSON Schema" in e for e in errors)


def test_validation_errors_carry_json_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "integer"}},
            "b": {"type": "string"},
        },
        "required": ["b"],
        "additionalProperties": False,
    }
    errors = validate_input(schema, {"a": [1, "x"], "c": 1})
    assert any(e.startswith("$.a[1]:") for e in errors)
    assert any("'b' is a required property" in e for e in errors)
    assert any("Additional properties" in e for e in errors)
    assert validate_input(schema, {"b": "ok"}) == []


def test_size_cap() -> None:
    schema = {"type": "object"}
    errors = validate_input(schema, {"x": "a" * 2000}, max_bytes=1000)
    assert errors and "over the 1000-byte limit" in errors[0]
    assert validate_input(schema, {"x": "a"}, max_bytes=1000) == []


def test_depth_limit_names_the_first_path_too_deep() -> None:
    from parkgate.schema import MAX_INPUT_DEPTH, depth_error

    ok: object = {"a": 1}
    for _ in range(MAX_INPUT_DEPTH - 1):
        ok = [ok]
    assert depth_error({"x": ok}) is not None  # the wrapper adds one level
    assert depth_error(ok) is None
    deep: object = []
    for _ in range(100_000):  # iterative: no RecursionError
        deep = {"k": deep}
    err = depth_error({"cmd": "x", "k": deep})
    assert err is not None and err.startswith("$.k" + ".k" * 63 + ":"), err[:80]
    assert validate_input(obj(), {"k": deep})[0].endswith("nested deeper than the 64-level limit")


def test_parkgates_own_tool_schemas_pass_draft7_where_registration_skips_it() -> None:
    # build_registry registers the built-in and composed tools with own=True:
    # no Draft 7 meta-schema check (and no jsonschema) at start, this test instead.
    from parkgate.tools import builtin_tools, composed_tools

    schemas = [factory().definition.input_schema for factory in [*builtin_tools(),
                                                                 *composed_tools()]]
    assert len(schemas) == 7
    for schema in schemas:
        assert check_schema_subset(schema) == []


def test_registration_of_anything_else_still_checks_the_meta_schema() -> None:
    from parkgate.runtime.tool_registry import build_registry
    from parkgate.tools import ReadFileTool

    class Strange(ReadFileTool):
        definition = ReadFileTool.definition.model_copy(update={
            "name": "strange", "input_schema": obj(path={"type": "strang"})})

    with pytest.raises(Exception, match="invalid JSON Schema"):
        build_registry([Strange])
    assert check_schema_subset(obj(path={"type": "strang"}), meta=False) == []
