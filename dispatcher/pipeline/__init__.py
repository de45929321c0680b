"""The classify/execute spine of the dispatcher (pure domain: no Temporal, no store).

- classification.py: ``classify`` decides Execute | Deny | NeedsApproval,
  without side effects or events;
- execution.py: ``execute`` runs a classified (and, if needed, approved) call
  and never re-classifies it;
- subcall_runner.py: the registry a composed tool calls its sub-tools through.

`Pipeline` joins them over one registry, policy, hooks, budget and limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from parkgate.models import Session, ToolUseBlock
from parkgate.pipeline.classification import (
    Classifier,
    deny_event,
    deny_result,
    run_from_deny,
)
from parkgate.pipeline.execution import GENERIC_FAILURE, Executor
from parkgate.pipeline.subcall_runner import Approver, Emit, SubCallRunner
from parkgate.registry import ToolRegistry
from parkgate.rules.budgets import BudgetSpec
from parkgate.rules.call_caps import Budget
from parkgate.rules.cedar import CedarPolicies
from parkgate.rules.policy import ConfirmationPolicy
from parkgate.truncation import Limits
from parkgate.verdicts import PreparedCall, ToolRun, Verdict

__all__ = [
    "GENERIC_FAILURE",
    "Approver",
    "Classifier",
    "Emit",
    "Executor",
    "Pipeline",
    "SubCallRunner",
    "classify",
    "deny_event",
    "deny_result",
    "execute",
    "run_from_deny",
]


class Pipeline(Executor):
    """Registry, policy (YAML and Cedar), hooks, budget, limits: decision and run logic."""

    def __init__(
        self,
        registry: ToolRegistry,
        policy: ConfirmationPolicy | None = None,
        *,
        hooks: Iterable[Any] = (),
        budget: Budget | None = None,
        limits: Limits | None = None,
        cedar: CedarPolicies | None = None,
        budgets: Mapping[str, BudgetSpec] | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy or ConfirmationPolicy()
        self.hooks: Sequence[Any] = tuple(hooks)
        self.budget = budget
        self.limits = limits or Limits()
        #: Cedar policies decided beside `policy` (parkgate.rules.cedar), if any.
        self.cedar = cedar
        #: The named budgets (parkgate.rules.budgets); the store keeps their counts.
        self.budgets: Mapping[str, BudgetSpec] = dict(budgets or {})


# ---------------------------------------------------------------- wrappers
async def classify(call: ToolUseBlock, session: Session, pipeline: Pipeline) -> Verdict:
    """Module-level form of ``Pipeline.classify``."""
    return await pipeline.classify(call, session)


async def execute(prepared: PreparedCall, pipeline: Pipeline, **kwargs: Any) -> ToolRun:
    """Module-level form of ``Pipeline.execute``."""
    return await pipeline.execute(prepared, **kwargs)
