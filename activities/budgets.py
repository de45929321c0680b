"""Budgets inside `parkgate.classify`: their state for Cedar, the call's reservation.

Classify is a local activity whose work Temporal may discard and run again,
so its one write here is idempotent by the call: the store keys a call's
charges by (session, tool_use_id) and a retried classification gets the
first one's answers back (parkgate.store.budget_store). What it reserved is
settled by the call's final row: kept if the call ran, released if not.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from parkgate.approvals.access import DEFAULT_PROJECT
from parkgate.calls.records import HistoryStore
from parkgate.models import Session, ToolUseBlock
from parkgate.pipeline import Pipeline
from parkgate.pipeline.budget_gate import charges_of, over_budget
from parkgate.rules.budgets import BudgetSpec, BudgetState, Over, states, windows
from parkgate.rules.cedar import UNKNOWN_KEY
from parkgate.verdicts import Deny, Verdict


def _who(session: Session, key_name: str | None, project: str | None) -> tuple[str, str, str]:
    return session.session_id, project or DEFAULT_PROJECT, key_name or UNKNOWN_KEY


async def budget_states(store: HistoryStore, budgets: Mapping[str, BudgetSpec],
                        session: Session, key_name: str | None, project: str | None,
                        now: datetime) -> dict[str, BudgetState]:
    """Every budget's state for this caller now (`context.budgets`)."""
    keys = windows(budgets, *_who(session, key_name, project), now)
    usage = await store.budget_usage(list(keys.values()))  # type: ignore[attr-defined]
    return states(budgets, {name: usage.get(key, 0) for name, key in keys.items()})


async def charge_call(pipeline: Pipeline, store: HistoryStore, verdict: Verdict,
                      call: ToolUseBlock, session: Session, key_name: str | None,
                      project: str | None, now: datetime) -> Verdict:
    """Reserve the call's charges and turn the budgets it does not fit into its
    verdict (park or deny: parkgate.pipeline.budget_gate). A denied call
    reserves nothing."""
    if isinstance(verdict, Deny) or not pipeline.budgets:
        return verdict
    budgets = pipeline.budgets
    charges = charges_of(pipeline, verdict.prepared, _who(session, key_name, project), now)
    if isinstance(charges, Deny):
        return charges
    deny = frozenset(n for n, spec in budgets.items() if spec.on_exceed == "deny")
    answers, _kept = await store.reserve_budgets(  # type: ignore[attr-defined]
        session.session_id, call.id, charges, deny)
    overs = [Over(a.charge.budget, budgets[a.charge.budget], a.charge.scope,
                  BudgetState(a.used_before, a.charge.limit), a.charge.amount)
             for a in answers if not a.fits and a.charge.budget in budgets]
    return over_budget(pipeline, verdict, overs)
