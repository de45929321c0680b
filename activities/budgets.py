"""Budgets inside `parkgate.classify`: their state for Cedar, the call's reservation.

Classify is a local activity whose work Temporal may discard and run again,
so its one write here is idempotent by the call: the store keys a call's
charges by (session, tool_use_id) and a retried classification gets the
first one's answers back (parkgate.store.budget_store). What it reserved is
settled by the call's final row: kept if the call ran, released if not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from parkgate.approvals.access import DEFAULT_PROJECT
from parkgate.calls.records import CallUpdate, HistoryStore
from parkgate.models import Session, ToolUseBlock
from parkgate.pipeline import Pipeline
from parkgate.pipeline.budget_gate import charges_of, over_budget
from parkgate.rules.budgets import (
    BudgetError,
    BudgetSpec,
    BudgetState,
    Over,
    charges_for,
    show_units,
    states,
    windows,
)
from parkgate.rules.cedar import UNKNOWN_KEY
from parkgate.verdicts import Deny, Verdict

log = logging.getLogger("parkgate.budgets")


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


async def reprice_edit(store: HistoryStore, budgets: Mapping[str, BudgetSpec],
                       row: CallUpdate) -> None:
    """Charge an approver's edited input, not the one the call was classified
    with (`BudgetStore.reprice_charges`), when `row` records an allow with
    edits. Called from the committed record of the decision; idempotent, so a
    retried record changes nothing more."""
    reprice = getattr(store, "reprice_charges", None)
    if (reprice is None or not budgets or row.decision != "allow_with_edits"
            or row.input is None):
        return
    sid, cid = row.session_id, row.tool_use_id
    call = await store.get_call(sid, cid)  # type: ignore[attr-defined]
    tool = row.tool_name or (call.tool_name if call is not None else None)
    if tool is None:
        return
    submitter = await store.get_submitter(sid, cid)  # type: ignore[attr-defined]
    session = await store.get_session(sid)  # type: ignore[attr-defined]
    stored = await store.call_charges(sid, cid)  # type: ignore[attr-defined]
    # The classification's time: its windows, for a budget the edit makes count.
    at = stored[0].created_at if stored else (call.created_at if call is not None else None)
    if at is None:
        return
    who = (sid, session.project if session is not None else DEFAULT_PROJECT,
           submitter.key_name if submitter is not None and submitter.key_name else UNKNOWN_KEY)
    try:
        charges = charges_for(budgets, tool, row.input, *who, at)
    except BudgetError as exc:  # revalidation refuses such an edit before it is decided
        log.warning("%s/%s: the edited input is not charged: %s", sid, cid, exc)
        return
    for budget, before, now in await reprice(sid, cid, charges):
        log.info("%s/%s: budget %s charged %s for the edited input (was %s)", sid, cid,
                 budget, show_units(now), show_units(before))


async def reprice_if_up(store: HistoryStore, budgets: Mapping[str, BudgetSpec],
                        row: CallUpdate | None) -> None:
    """`reprice_edit` before a tool runs: a store outage must not stop the run
    (its decision travels back the same way), so the call then keeps the
    charge of its classified input, and the log says so."""
    if row is None or not budgets:
        return
    try:
        await reprice_edit(store, budgets, row)
    except Exception:
        log.warning("store unavailable; %s/%s keeps the budget charge of its classified input",
                    row.session_id, row.tool_use_id)
