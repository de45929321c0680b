"""What a gated (client-executed) tool is, independent of any HTTP call.

A tool the agent runs itself is declared to parkgate by name, description,
JSON schema and side-effect class; parkgate gates each call and releases the
arguments to run. This module turns a Python function (or a framework's tool
schema) into that declaration, binds released arguments back to the
function, and turns a return value into the content parkgate records.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic_core import to_jsonable_python

from parkgate.client_tools.declared import MAX_DESCRIPTION
from parkgate.models import (
    TOOL_NAME_PATTERN,
    ContentBlock,
    ImageBlock,
    SideEffects,
    TextBlock,
    ToolResultBlock,
)
from parkgate.schema import check_schema_subset

#: What a tool may return to be recorded as-is (else it is rendered as JSON text).
_BLOCKS: TypeAdapter[list[ContentBlock]] = TypeAdapter(list[ContentBlock])


class ClientToolDefinition(BaseModel):
    """One entry of `client_tools` in `POST /v1/sessions`: a tool the client runs."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str
    input_schema: dict[str, Any]
    side_effects: SideEffects

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def definition(
    name: str, description: str, input_schema: Mapping[str, Any],
    side_effects: SideEffects | str,
) -> ClientToolDefinition:
    """A declaration whose schema is brought into parkgate's schema subset.

    Raises ValueError naming the construct when the schema cannot be expressed
    there (a recursive model, a union of objects): better at declaration than
    as a 422 on the first call.
    """
    schema = subset_schema(input_schema)
    problems = check_schema_subset(schema)
    if problems:
        raise ValueError(f"tool {name!r}: input schema not supported: {'; '.join(problems)}")
    return ClientToolDefinition(name=name,
                                description=(description.strip() or name)[:MAX_DESCRIPTION],
                                input_schema=schema, side_effects=SideEffects(side_effects))


# ------------------------------------------------------------------ schema subset
def subset_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` (as pydantic, OpenAI or LangChain write it) in parkgate's subset.

    Inlines `$ref`s to `$defs`, turns `anyOf` of plain typed branches (what an
    `Optional[X]` or `int | str` becomes) into a `type` list, drops `title`s.
    Anything else is left for `check_schema_subset` to name.
    """
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    out = _inline(copy.deepcopy(dict(schema)), defs, ())
    out.pop("$defs", None)
    out.pop("definitions", None)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


def _inline(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in defs:
        key = ref.rsplit("/", 1)[-1]
        if key in seen:
            raise ValueError(f"recursive schema ({key}) cannot be inlined")
        target = {**copy.deepcopy(defs[key]), **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(target, defs, (*seen, key))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" or key in ("$defs", "definitions"):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {k: _inline(v, defs, seen) for k, v in value.items()}
        else:
            out[key] = _inline(value, defs, seen)
    branches = out.get("anyOf")
    if isinstance(branches, list) and all(_plain_typed(b) for b in branches):
        types: list[str] = []
        merged: dict[str, Any] = {}
        for branch in branches:
            kinds = branch["type"] if isinstance(branch["type"], list) else [branch["type"]]
            types.extend(t for t in kinds if t not in types)
            merged.update({k: v for k, v in branch.items() if k != "type"})
        del out["anyOf"]
        out = {**merged, **out, "type": types[0] if len(types) == 1 else types}
    return out


def _plain_typed(branch: Any) -> bool:
    """A branch that only narrows one JSON type (so branches merge without ambiguity)."""
    if not isinstance(branch, dict) or "type" not in branch:
        return False
    return not any(k in branch for k in ("anyOf", "oneOf", "allOf", "$ref", "properties"))


# ------------------------------------------------------------------ functions
class FunctionSignature:
    """A plain function's arguments as a pydantic model: its JSON schema and the
    validation that turns released JSON arguments back into call arguments."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.signature = inspect.signature(fn)
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        for param in self.signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"gate: {fn.__name__} takes *args/**kwargs; "
                                "a tool needs named parameters")
            annotation = hints.get(param.name, Any)
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (annotation, default)
        self.model: type[BaseModel] = create_model(  # type: ignore[call-overload]
            f"{fn.__name__}_input", __config__=ConfigDict(extra="forbid"), **fields)

    def schema(self) -> dict[str, Any]:
        return self.model.model_json_schema()

    def to_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The JSON input of a Python call `fn(*args, **kwargs)` (what parkgate gates)."""
        bound = self.signature.bind(*args, **kwargs)
        validated = self.model.model_validate(dict(bound.arguments))
        # The arguments given, whole (nested defaults shown): what an approver reads.
        return dict(validated.model_dump(mode="json", include=set(bound.arguments)))

    def to_kwargs(self, released: Mapping[str, Any]) -> dict[str, Any]:
        """Call arguments from the released input (the approver may have edited it)."""
        validated = self.model.model_validate(dict(released))
        return {name: getattr(validated, name) for name in self.model.model_fields}


def description_of(fn: Callable[..., Any]) -> str:
    """The docstring, cleaned (what the model reads about the tool)."""
    return (inspect.getdoc(fn) or "").strip() or fn.__name__


# ------------------------------------------------------------------ results
def content_of(value: Any) -> str | list[dict[str, Any]]:
    """What parkgate records of a function's return value: a string as is, content
    blocks (TextBlock/ImageBlock or their dicts) as blocks, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (TextBlock, ImageBlock)):
        return [value.model_dump(mode="json")]
    if isinstance(value, list) and value and all(
            isinstance(v, (TextBlock, ImageBlock)) or (isinstance(v, dict) and "type" in v)
            for v in value):
        try:
            return [b.model_dump(mode="json") for b in _BLOCKS.validate_python(value)]
        except ValueError:
            pass
    if value is None:
        return ""
    try:
        return json.dumps(to_jsonable_python(value), ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON-able (pydantic's error is a ValueError)
        return str(value)


def error_text(exc: BaseException) -> str:
    """The is_error content reported when the function raised."""
    return f"{type(exc).__name__}: {exc}"


def local_result(tool_use_id: str, content: str | list[dict[str, Any]],
                 is_error: bool) -> ToolResultBlock:
    """The result block of a run this process did (the same one parkgate records)."""
    blocks = [TextBlock(text=content)] if isinstance(content, str) else \
        _BLOCKS.validate_python(content)
    return ToolResultBlock(tool_use_id=tool_use_id, content=blocks, is_error=is_error)


#: How an adapter is told the side-effect class: one for every tool, or per name.
SideEffectsSpec = SideEffects | str | Mapping[str, SideEffects | str]


def side_effects_for(name: str, spec: SideEffectsSpec) -> SideEffects:
    """The class of tool `name`; a mapping must name every gated tool (parkgate's
    policy decides by it, so the adapter never guesses)."""
    if isinstance(spec, Mapping):
        if name not in spec:
            raise ValueError(f"side_effects names no class for tool {name!r}")
        return SideEffects(spec[name])
    return SideEffects(spec)
