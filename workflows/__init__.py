"""Temporal workflow definitions (deterministic code only; no I/O imports).

`ALL` is the one list every worker registers (production, tests, replay).

The names are resolved lazily: the workflow sandbox re-imports a workflow's
module, and with it this package, for every new workflow run, so importing
`workflows.call` must not also execute `workflows.turn` (and re-apply its
decorators) each time a tool call starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parkgate.workflows.call import ToolCallWorkflow
    from parkgate.workflows.late_outcome import LateOutcomeWorkflow
    from parkgate.workflows.slack_outcome import SlackOutcomeWorkflow
    from parkgate.workflows.subcall_park import SubCallApprovalWorkflow
    from parkgate.workflows.turn import TurnWorkflow

    ALL: list[type]

__all__ = ["ALL", "LateOutcomeWorkflow", "SlackOutcomeWorkflow", "SubCallApprovalWorkflow",
           "ToolCallWorkflow", "TurnWorkflow"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'parkgate.workflows' has no attribute {name!r}")
    from parkgate.workflows.call import ToolCallWorkflow
    from parkgate.workflows.late_outcome import LateOutcomeWorkflow
    from parkgate.workflows.slack_outcome import SlackOutcomeWorkflow
    from parkgate.workflows.subcall_park import SubCallApprovalWorkflow
    from parkgate.workflows.turn import TurnWorkflow

    return {
        "ALL": [ToolCallWorkflow, TurnWorkflow, SlackOutcomeWorkflow, LateOutcomeWorkflow,
                SubCallApprovalWorkflow],
        "LateOutcomeWorkflow": LateOutcomeWorkflow,
        "SlackOutcomeWorkflow": SlackOutcomeWorkflow,
        "SubCallApprovalWorkflow": SubCallApprovalWorkflow,
        "ToolCallWorkflow": ToolCallWorkflow,
        "TurnWorkflow": TurnWorkflow,
    }[name]
