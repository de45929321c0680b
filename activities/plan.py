"""ExecPlan: per-call timeouts and approval expiry, computed from settings.

Computed inside the classify activity so the workflow receives every
configurable knob through history (workflows may not read settings).
"""

from __future__ import annotations

from parkgate import models
from parkgate.durable.payloads import ExecPlan
from parkgate.models import SideEffects, ToolDefinition
from parkgate.settings import Settings


def tool_timeout(definition: ToolDefinition | None, settings: Settings) -> float:
    """Per-tool timeout, else the class default (see `parkgate.models.tool_timeout`)."""
    return models.tool_timeout(
        definition,
        default_seconds=settings.default_timeout_seconds,
        execute_seconds=settings.execute_timeout_seconds,
    )


def approval_expiry(definition: ToolDefinition | None, settings: Settings) -> float | None:
    """Seconds a parked call waits for a decision; None = never.

    Precedence: the tool's own `approval_expiry_seconds`, then the side-effect
    class entry of `approval_expiry_by_class` (keys case-insensitive), then
    `approval_expiry_seconds`. Zero (or a negative value) means never.
    """
    value: float | None = None
    if definition is not None and definition.approval_expiry_seconds is not None:
        value = definition.approval_expiry_seconds
    elif definition is not None:
        by_class = {k.lower(): v for k, v in settings.approval_expiry_by_class.items()}
        value = by_class.get(definition.side_effects.value)
    if value is None:
        value = settings.approval_expiry_seconds
    return value if value and value > 0 else None


def parks_sub_calls(definition: ToolDefinition | None) -> bool:
    """A non-atomic composed tool: its sub-calls may park for a human mid-run."""
    return definition is not None and bool(definition.composed_of) and not definition.atomic


def plan_for(definition: ToolDefinition | None, settings: Settings) -> ExecPlan:
    side_effects = definition.side_effects if definition else SideEffects.NONE
    return ExecPlan(
        # A run that may wait for a human needs heartbeats: a regular activity.
        local=not side_effects.mutates and not parks_sub_calls(definition),
        start_to_close_seconds=tool_timeout(definition, settings) + settings.cancel_grace_seconds,
        heartbeat_timeout_seconds=settings.execute_heartbeat_timeout_seconds,
        expiry_seconds=approval_expiry(definition, settings),
        unclaimed_seconds=settings.client_unclaimed_seconds,
    )
