"""Workflow-facing names for the durable payload models (defined in parkgate.durable.payloads)."""

from parkgate.durable.payloads import (
    CallInput,
    CallOutcome,
    CallStatusView,
    DecideInput,
    DecideResult,
    DecisionRecord,
    StatusRequest,
    TurnInput,
    TurnOutcome,
)

__all__ = [
    "CallInput",
    "CallOutcome",
    "CallStatusView",
    "DecideInput",
    "DecideResult",
    "DecisionRecord",
    "StatusRequest",
    "TurnInput",
    "TurnOutcome",
]
