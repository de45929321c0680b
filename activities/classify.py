"""`parkgate.classify` and `parkgate.revalidate`: pure decisions, run as local activities."""

from __future__ import annotations

import inspect

from temporalio import activity

from activities.deps import Deps
from activities.execute import ExecuteActivities
from activities.plan import plan_for
from dispatcher.durable_models import (
    ACT_CLASSIFY,
    ACT_REVALIDATE,
    ClassifyInput,
    ClassifyOutput,
    ExecPlan,
    ExecuteInput,
    RevalidateInput,
    RevalidateOutput,
    with_prepared,
)
from dispatcher.models import utcnow
from dispatcher.verdicts import Deny, Execute, PreparedCall


class ClassifyActivities:
    """Wraps Pipeline.classify / Pipeline.revalidate (no side effects, safe to retry).

    An auto-approved NONE/READ call is also run here when the workflow asks
    (`ClassifyInput.run_row`): reads are idempotent, and one local activity
    instead of two saves a round through the workflow per call.
    """

    def __init__(self, deps: Deps, runner: ExecuteActivities | None = None) -> None:
        self.deps = deps
        self.runner = runner or ExecuteActivities(deps)

    @activity.defn(name=ACT_CLASSIFY)
    async def classify(self, inp: ClassifyInput) -> ClassifyOutput:
        verdict = await self.deps.pipeline.classify(inp.call, inp.session)
        definition = None if isinstance(verdict, Deny) else verdict.prepared.definition
        out = ClassifyOutput(verdict=verdict, plan=plan_for(definition, self.deps.settings))
        if inp.run_row is not None and isinstance(verdict, Execute) and self._runs_here(out.plan):
            row = with_prepared(inp.run_row, verdict.prepared)
            out.executed = await self.runner.run_local(
                ExecuteInput(
                    prepared=verdict.prepared,
                    approved_hash=verdict.prepared.input_hash,
                    workflow_id=row.workflow_id or "",
                    initial=row,
                    final=row,
                )
            )
        return out

    @staticmethod
    def _runs_here(plan: ExecPlan) -> bool:
        """A local run whose time limit fits in what is left of this activity's."""
        if not plan.local:
            return False
        try:
            info = activity.info()
        except RuntimeError:  # called directly, not as an activity
            return True
        if info.start_to_close_timeout is None:
            return True
        elapsed = (utcnow() - info.started_time).total_seconds()
        return plan.start_to_close_seconds <= info.start_to_close_timeout.total_seconds() - elapsed

    @activity.defn(name=ACT_REVALIDATE)
    async def revalidate(self, inp: RevalidateInput) -> RevalidateOutput:
        """Re-validate and re-scope an approver's edited input."""
        checked = self.deps.pipeline.revalidate(inp.prepared, inp.new_input)
        if inspect.isawaitable(checked):
            checked = await checked
        if isinstance(checked, PreparedCall):
            return RevalidateOutput(prepared=checked)
        assert isinstance(checked, Deny)
        return RevalidateOutput(error=checked.result.text, error_class=checked.error_class)
