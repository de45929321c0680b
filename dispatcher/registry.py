"""Tool registry: factories (never singletons), name conflicts, session visibility.

A tool is registered as a zero-argument factory; the pipeline calls it once per
execution so concurrent calls never share state. Registration rejects a
definition that is malformed, outside the JSON Schema subset, a duplicate name,
or a composed tool whose label hides what its sub-tools can do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from parkgate.context import ToolContext
from parkgate.errors import ToolNameConflictError, ToolRegistrationError
from parkgate.models import Session, SideEffects, ToolDefinition, ToolOutput
from parkgate.schema import check_schema_subset


@runtime_checkable
class Tool(Protocol):
    """Implemented by every tool. A fresh instance handles one execute()."""

    definition: ToolDefinition

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        """Run the tool on validated input; raise ToolError subclasses on failure."""
        ...

    async def cancel(self) -> bool:
        """Abort an in-flight execution; True if cancelled cleanly. Idempotent."""
        ...


ToolFactory = Callable[[], Tool]


class ToolRegistry:
    """Name -> factory, with the definition checked once at registration."""

    def __init__(self) -> None:
        self._factories: dict[str, ToolFactory] = {}
        self._definitions: dict[str, ToolDefinition] = {}

    # -------------------------------------------------------------- mutation
    def register(self, factory: ToolFactory, *, own: bool = False) -> ToolDefinition:
        """Validate and register ``factory``; returns the tool's definition.

        `own=True` for parkgate's built-in and composed tools only: their schemas
        are checked against Draft 7's meta-schema by a test rather than here, so a
        registry of them alone does not import jsonschema (parkgate.schema)."""
        if not callable(factory):
            raise ToolRegistrationError(
                "register() takes a zero-argument factory producing a Tool, "
                f"not {type(factory).__name__}"
            )
        if isinstance(factory, Tool) and not isinstance(factory, type):
            raise ToolRegistrationError(
                "register() takes a factory, not a Tool instance "
                "(pass the class or a function returning a new instance)"
            )
        try:
            first, second = factory(), factory()
        except Exception as exc:
            raise ToolRegistrationError(f"tool factory raised {type(exc).__name__}: {exc}") from exc
        if first is second:
            raise ToolRegistrationError(
                "tool factory must return a fresh instance per call (got the same object twice)"
            )
        definition = self._check_instance(first, meta=not own)
        self._check_instance(second, expected=definition)
        if definition.name in self._factories:
            raise ToolNameConflictError(f"a tool named '{definition.name}' is already registered")
        self._check_composition(definition)
        self._factories[definition.name] = factory
        self._definitions[definition.name] = definition
        return definition

    def unregister(self, name: str) -> None:
        """Remove a tool; refuses while a composed tool still declares it."""
        if name not in self._factories:
            raise KeyError(f"no tool named '{name}' is registered")
        users = sorted(
            d.name for d in self._definitions.values() if d.composed_of and name in d.composed_of
        )
        if users:
            raise ToolRegistrationError(
                f"cannot unregister '{name}': composed tool(s) {users} call it"
            )
        del self._factories[name]
        del self._definitions[name]

    # ---------------------------------------------------------------- lookup
    def get(self, name: str) -> ToolDefinition | None:
        return self._definitions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._definitions

    def names(self) -> list[str]:
        return sorted(self._definitions)

    def definitions(self) -> list[ToolDefinition]:
        return [self._definitions[n] for n in self.names()]

    def definitions_for(self, session: Session) -> list[ToolDefinition]:
        """Definitions visible to ``session`` (workers do not see hidden tools)."""
        return [d for d in self.definitions() if self.visible_to(d, session)]

    @staticmethod
    def visible_to(definition: ToolDefinition, session: Session) -> bool:
        return not (session.kind == "worker" and definition.hidden_from_workers)

    def create(self, name: str) -> Tool:
        """A fresh instance of tool ``name``."""
        try:
            factory = self._factories[name]
        except KeyError:
            raise KeyError(f"no tool named '{name}' is registered") from None
        tool = factory()
        if getattr(tool, "definition", None) is None or tool.definition.name != name:
            raise ToolRegistrationError(f"factory for '{name}' produced a different tool")
        return tool

    # ---------------------------------------------------------------- checks
    @staticmethod
    def _check_instance(
        tool: Any, expected: ToolDefinition | None = None, *, meta: bool = True
    ) -> ToolDefinition:
        definition = getattr(tool, "definition", None)
        if not isinstance(definition, ToolDefinition):
            raise ToolRegistrationError(
                f"tool {type(tool).__name__} has no ToolDefinition in .definition"
            )
        for method in ("execute", "cancel"):
            if not callable(getattr(tool, method, None)):
                raise ToolRegistrationError(f"tool '{definition.name}' has no {method}() method")
        if expected is not None:
            if definition != expected:
                raise ToolRegistrationError(
                    f"tool factory for '{expected.name}' returned differing definitions"
                )
            return definition
        if not isinstance(definition.side_effects, SideEffects):
            raise ToolRegistrationError(f"tool '{definition.name}' must declare side_effects")
        problems = check_schema_subset(definition.input_schema, meta=meta)
        if problems:
            raise ToolRegistrationError(
                f"tool '{definition.name}' input_schema is outside the supported subset: "
                + "; ".join(problems)
            )
        props = definition.input_schema.get("properties", {})
        for field in definition.path_fields:
            spec = props.get(field)
            if not isinstance(spec, dict) or spec.get("type") != "string":
                raise ToolRegistrationError(
                    f"tool '{definition.name}' path field '{field}' must be a string property "
                    "of input_schema"
                )
        if definition.atomic and not definition.composed_of:
            raise ToolRegistrationError(
                f"tool '{definition.name}' is atomic but declares no composed_of sub-tools"
            )
        return definition

    def _check_composition(self, definition: ToolDefinition) -> None:
        if not definition.composed_of:
            return
        missing = [n for n in definition.composed_of if n not in self._definitions]
        if missing:
            raise ToolRegistrationError(
                f"composed tool '{definition.name}' uses unregistered sub-tool(s) {missing}; "
                "register them first"
            )
        if definition.name in definition.composed_of:
            raise ToolRegistrationError(f"composed tool '{definition.name}' cannot call itself")
        highest = max(
            (self._definitions[n] for n in definition.composed_of),
            key=lambda d: d.side_effects.rank,
        )
        if definition.side_effects.rank < highest.side_effects.rank:
            raise ToolRegistrationError(
                f"composed tool '{definition.name}' is labelled "
                f"{definition.side_effects.value.upper()} but sub-tool '{highest.name}' is "
                f"{highest.side_effects.value.upper()}; a composed tool must declare at least "
                "the highest side-effect class of its sub-tools"
            )
