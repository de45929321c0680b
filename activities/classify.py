"""`parkgate.classify` and `parkgate.revalidate`: pure decisions, run as local activities."""

from __future__ import annotations

import inspect

from temporalio import activity

from activities.deps import Deps
from activities.plan import plan_for
from dispatcher.durable_models import (
    ACT_CLASSIFY,
    ACT_REVALIDATE,
    ClassifyInput,
    ClassifyOutput,
    RevalidateInput,
    RevalidateOutput,
)
from dispatcher.verdicts import Deny, PreparedCall


class ClassifyActivities:
    """Wraps Pipeline.classify / Pipeline.revalidate (no side effects, safe to retry)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn(name=ACT_CLASSIFY)
    async def classify(self, inp: ClassifyInput) -> ClassifyOutput:
        verdict = await self.deps.pipeline.classify(inp.call, inp.session)
        definition = None if isinstance(verdict, Deny) else verdict.prepared.definition
        return ClassifyOutput(verdict=verdict, plan=plan_for(definition, self.deps.settings))

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
