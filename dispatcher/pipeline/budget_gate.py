"""What a verdict becomes when the call does not fit a budget (issue 39, part 4).

The store decides whether a call fits (an atomic reservation,
parkgate.store.budget_store); this turns the budgets it did not fit into the
call's verdict: a `deny` budget denies it with an error naming the budget; a
`park` budget (the default) parks it for a person, the reason naming the
budget and its state. Policy's own decision is never loosened: a call policy
denies stays denied, one it parks stays parked with the budget's reason added.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from parkgate.models import ToolErrorClass
from parkgate.pipeline.classification import Classifier, deny_result
from parkgate.rules.budgets import RULE_PREFIX, BudgetError, Charge, Over, charges_for
from parkgate.rules.policy import PolicyDecision
from parkgate.verdicts import Deny, NeedsApproval, PreparedCall, Verdict


def charges_of(classifier: Classifier, prepared: PreparedCall, who: tuple[str, str, str],
               now: datetime) -> list[Charge] | Deny:
    """What the call adds to each budget (`who`: session, project, key), or the
    denial of an input a budget cannot count (negative, not a number)."""
    call = prepared.call
    try:
        return charges_for(classifier.budgets, call.name, call.input, *who, now)
    except BudgetError as exc:
        return deny_result(call.id, ToolErrorClass.VALIDATION_ERROR,
                           f"Invalid input for tool '{call.name}': {exc}",
                           rule=RULE_PREFIX + exc.budget, definition=prepared.definition)


def over_budget(classifier: Classifier, verdict: Verdict, overs: Sequence[Over]) -> Verdict:
    """`verdict` when every budget fits, else the denial or the park they ask for."""
    if not overs or isinstance(verdict, Deny):
        return verdict
    prepared = verdict.prepared
    denying = [o for o in overs if o.spec.on_exceed == "deny"]
    if denying:
        first = denying[0]
        return deny_result(prepared.call.id, ToolErrorClass.PERMISSION_DENIED, first.denial(),
                           rule=f"{RULE_PREFIX}{first.name}", definition=prepared.definition)
    reason = "; ".join(o.reason() for o in overs)
    if isinstance(verdict, NeedsApproval):
        rule = f"{verdict.info.rule}; {reason}"
        # Parked at a cap: a person decides this call, never a remembered "once".
        info = verdict.info.model_copy(update={"rule": rule, "mode": "prompt"})
        return NeedsApproval(prepared=prepared.model_copy(update={"rule": rule}), info=info)
    rule = reason if prepared.rule is None else f"{prepared.rule}; {reason}"
    parked = prepared.model_copy(update={"rule": rule, "remembered_by": None,
                                         "remembered_principal": None})
    return classifier.approval(parked, PolicyDecision(mode="prompt", rule=rule))
