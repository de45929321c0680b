"""Temporal workflow definitions (deterministic code only; no I/O imports).

`ALL` is the one list every worker registers (production, tests, replay).
"""

from workflows.call import ToolCallWorkflow
from workflows.turn import TurnWorkflow

ALL: list[type] = [ToolCallWorkflow, TurnWorkflow]

__all__ = ["ALL", "ToolCallWorkflow", "TurnWorkflow"]
