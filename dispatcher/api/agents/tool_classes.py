"""The class this deployment gives a client tool, which no declaration loosens.

A session's `client_tools` name their class (`side_effects`), and the policy's
defaults go by class: an agent declaring Claude Code's `Bash` as `none` would
run it with no approval. So the deployment's class for a name
(`claude_code_tools`, Claude Code's built-in table, parkgate's own MCP tools;
parkgate.dialects.claude_code.deployment_class) is a floor: POST /v1/sessions
refuses a looser declaration with a 422 naming the tool, and every submit
takes the stricter of the two for declarations stored before the settings
changed. `per_tool` and argument `rules` name tools, not classes: they apply
to a declared tool whatever class it declares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parkgate.api.shared.errors import ApiError
from parkgate.client_tools.declared import ClientToolSpec, Floor, covers
from parkgate.dialects import claude_code
from parkgate.models import SideEffects
from parkgate.settings import Settings


def deployment_class(settings: Settings, registry: Any,
                     name: str) -> tuple[SideEffects, str] | None:
    """The class (and its source) this deployment gives the tool `name`."""
    def known(served: str) -> SideEffects | None:
        definition = registry.get(served)
        return definition.side_effects if definition is not None else None
    return claude_code.deployment_class(name, settings.claude_code_tools, known)


def floor(settings: Settings, registry: Any) -> Floor:
    """`deployment_class` as the floor `client_tools.definitions` applies."""
    def at_least(name: str) -> SideEffects | None:
        found = deployment_class(settings, registry, name)
        return found[0] if found is not None else None
    return at_least


def check_declared(tools: Sequence[ClientToolSpec], settings: Settings, registry: Any) -> None:
    """422 for a declaration looser than the deployment's class of its tool."""
    for tool in tools:
        found = deployment_class(settings, registry, tool.name)
        if found is None or covers(tool.side_effects, found[0]):
            continue
        cls, source = found
        raise ApiError(
            422, "client_tool_too_loose",
            f"client tool {tool.name!r} is classed {cls.value} by this deployment ({source}); "
            f"a session may not declare it {tool.side_effects.value} (declare "
            f"{cls.value} or stricter)",
            {"tool": tool.name, "declared": tool.side_effects.value, "class": cls.value})
