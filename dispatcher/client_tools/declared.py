"""A session's declared client tools: tools its own client (the agent's
process) runs. parkgate classifies, parks and releases their calls and records
what the client reports; it never runs them. Pure domain (no I/O).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parkgate.models import TOOL_NAME_PATTERN, SideEffects, ToolDefinition
from parkgate.schema import check_schema_subset

#: How many client tools one session may declare.
MAX_CLIENT_TOOLS = 128
#: The longest description a client tool may declare.
MAX_DESCRIPTION = 4000


class ClientToolSpec(BaseModel):
    """A client tool as declared: `{name, description, input_schema, side_effects}`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    side_effects: SideEffects

    @field_validator("input_schema")
    @classmethod
    def _subset(cls, schema: dict[str, Any]) -> dict[str, Any]:
        errors = check_schema_subset(schema)
        if errors:
            raise ValueError("; ".join(errors))
        return schema

    def definition(self) -> ToolDefinition:
        """The tool as the pipeline classifies it: no workspace, run by the client."""
        return ToolDefinition(
            name=self.name, description=self.description, input_schema=self.input_schema,
            side_effects=self.side_effects, requires_workspace=False, client_executed=True,
        )


#: What each class may do: a class covers the ones it may stand for (execute
#: can do anything; write and network each cover read and none).
_COVERS: dict[SideEffects, frozenset[SideEffects]] = {
    SideEffects.NONE: frozenset({SideEffects.NONE}),
    SideEffects.READ: frozenset({SideEffects.NONE, SideEffects.READ}),
    SideEffects.WRITE: frozenset({SideEffects.NONE, SideEffects.READ, SideEffects.WRITE}),
    SideEffects.NETWORK: frozenset({SideEffects.NONE, SideEffects.READ, SideEffects.NETWORK}),
    SideEffects.EXECUTE: frozenset(SideEffects),
}

#: The class a deployment gives a tool name (None: it says nothing of it).
Floor = Callable[[str], SideEffects | None]


def covers(declared: SideEffects, floor: SideEffects) -> bool:
    """`declared` is at least as strict as `floor` (it may do all `floor` may)."""
    return floor in _COVERS[declared]


def stricter(a: SideEffects, b: SideEffects) -> SideEffects:
    """The least class covering both (write and network: execute)."""
    if covers(a, b):
        return a
    return b if covers(b, a) else SideEffects.EXECUTE


def definitions(stored: list[dict[str, Any]] | None,
                floor: Floor | None = None) -> list[ToolDefinition]:
    """The stored declarations of a session as tool definitions; with `floor`,
    each at least as strict as the deployment's class for its name (a
    declaration never loosens the operator's classification, even one stored
    before the settings changed)."""
    found = [ClientToolSpec.model_validate(s).definition() for s in stored or []]
    if floor is None:
        return found
    out = []
    for d in found:
        base = floor(d.name)
        cls = d.side_effects if base is None else stricter(d.side_effects, base)
        out.append(d if cls == d.side_effects else d.model_copy(update={"side_effects": cls}))
    return out


def named(stored: list[dict[str, Any]] | None, name: str) -> ToolDefinition | None:
    """The session's client tool called `name`, if it declared one."""
    return next((d for d in definitions(stored) if d.name == name), None)
