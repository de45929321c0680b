"""JSON Schema subset checking (registration) and input validation (classify).

Providers disagree on JSON Schema support, so tool input schemas must stay in
the canonical subset; anything else is rejected at registration with the JSON
path of the offending construct. Inputs are validated with Draft7Validator.

jsonschema (with referencing, rpds and attrs: ~3 MB resident) is imported where
a schema is checked against Draft 7's meta-schema or an input is validated, not
with this module: `parkgate api` registers parkgate's own tools at start, whose
schemas tests/dispatcher/test_schema.py checks (`check_schema_subset(...,
meta=False)`), and holds jsonschema only from the first call it validates.
"""

from __future__ import annotations

import json
from typing import Any

#: Keywords that are never allowed anywhere in a tool input schema.
FORBIDDEN_KEYWORDS: tuple[str, ...] = (
    "$ref",
    "oneOf",
    "anyOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "definitions",
    "$defs",
    "dependencies",
    "dependentSchemas",
)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() or key.startswith("$") else f"{path}[{key!r}]"


def _walk(schema: Any, path: str, errors: list[str]) -> None:
    if not isinstance(schema, dict):
        if not isinstance(schema, bool):
            errors.append(f"{path}: a schema must be an object, got {type(schema).__name__}")
        return
    for key in schema:
        if key in FORBIDDEN_KEYWORDS:
            errors.append(f"{_child(path, key)}: '{key}' is not allowed in tool input schemas")
    extra = schema.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        errors.append(f"{path}.additionalProperties: only true/false is allowed, not a schema")
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            _walk(sub, _child(f"{path}.properties", str(name)), errors)
    elif props is not None:
        errors.append(f"{path}.properties: must be an object")
    items = schema.get("items")
    if isinstance(items, list):
        for i, sub in enumerate(items):
            _walk(sub, f"{path}.items[{i}]", errors)
    elif items is not None:
        _walk(items, f"{path}.items", errors)


def check_schema_subset(schema: Any, *, meta: bool = True) -> list[str]:
    """Every reason ``schema`` is not an acceptable tool input schema ([] if fine).

    `meta=False` skips the check against Draft 7's meta-schema (and jsonschema's
    import): only for parkgate's own tools, whose schemas a test checks instead."""
    errors: list[str] = []
    if not isinstance(schema, dict):
        return [f"$: input_schema must be an object, got {type(schema).__name__}"]
    if schema.get("type") != "object":
        errors.append("$.type: the top-level input schema must have type 'object'")
    _walk(schema, "$", errors)
    if not meta:
        return errors
    from jsonschema import Draft7Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft7Validator.check_schema(schema)
    except SchemaError as exc:
        errors.append(f"{json_path(exc.absolute_path)}: invalid JSON Schema: {exc.message}")
    return errors


def json_path(parts: Any) -> str:
    """Render a jsonschema deque path as ``$.a.b[0]``."""
    out = "$"
    for part in parts:
        out = f"{out}[{part}]" if isinstance(part, int) else _child(out, str(part))
    return out


def input_size(tool_input: Any) -> int:
    """Bytes of the compact JSON serialization of ``tool_input``."""
    return len(
        json.dumps(tool_input, separators=(",", ":"), ensure_ascii=False, default=str).encode(
            "utf-8"
        )
    )


#: Deepest JSON nesting accepted in a tool input (the root object is depth 1).
#: Deeper values recurse through every serializer on the durable path (JSON,
#: pydantic, Temporal payloads), so they are refused before anything starts.
MAX_INPUT_DEPTH = 64


def depth_error(value: Any, max_depth: int = MAX_INPUT_DEPTH, root: str = "$") -> str | None:
    """``"<path>: ..."`` for the first place ``value`` nests deeper than
    ``max_depth`` containers, else None. Iterative: deep input cannot make the
    check itself overflow the stack."""
    stack: list[tuple[Any, str, int]] = [(value, root, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            children: list[tuple[Any, str]] = [(v, _child(path, str(k))) for k, v in item.items()]
        elif isinstance(item, list):
            children = [(v, f"{path}[{i}]") for i, v in enumerate(item)]
        else:
            continue
        if depth > max_depth:
            return f"{path}: nested deeper than the {max_depth}-level limit"
        stack.extend((child, child_path, depth + 1) for child, child_path in children)
    return None


def validate_input(
    schema: dict[str, Any],
    tool_input: Any,
    *,
    max_bytes: int | None = None,
    max_depth: int = MAX_INPUT_DEPTH,
) -> list[str]:
    """Validation errors for ``tool_input`` (each prefixed by its JSON path); [] if valid."""
    too_deep = depth_error(tool_input, max_depth)
    if too_deep is not None:
        return [too_deep]
    if max_bytes is not None:
        size = input_size(tool_input)
        if size > max_bytes:
            return [f"$: input is {size} bytes, over the {max_bytes}-byte limit"]
    from jsonschema import Draft7Validator

    validator = Draft7Validator(schema)
    errors = sorted(validator.iter_errors(tool_input), key=lambda e: list(map(str, e.path)))
    return [f"{json_path(e.absolute_path)}: {e.message}" for e in errors]
