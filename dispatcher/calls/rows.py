"""A call's row from what the durable path knows: the store side's one mapping.

The workflow hands activities ids (`CallRef`) and facts (a verdict, the
prepared call, an approval's decision, an outcome: `CallFacts`); the
activities, which write the store, turn them into `CallUpdate`s here. So the
row's shape is known in one place, and no workflow payload carries a row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, overload

from parkgate.approvals.decisions import CALL_DECISION_FIELDS
from parkgate.calls.records import (
    ApprovalRecord,
    CallEnd,
    CallFacts,
    CallOpening,
    CallRef,
    CallStatus,
    CallUpdate,
)
from parkgate.verdicts import ApprovalInfo, PreparedCall


def opening_of(prepared: PreparedCall, verdict: str | None = None) -> CallOpening:
    """The first row's facts of a classified call (verdict None: left as stored)."""
    return CallOpening(
        call=prepared.call,
        verdict=verdict,
        input_hash=prepared.input_hash,
        side_effects=prepared.definition.side_effects,
        rule=prepared.rule,
        remembered_by=prepared.remembered_by,
        remembered_principal=prepared.remembered_principal,
    )


def opening_columns(opening: CallOpening) -> dict[str, Any]:
    """The row columns classification decides (normalized input, hash, class,
    rule; the maker of a remembered rule that approved it)."""
    columns: dict[str, Any] = {
        "tool_name": opening.call.name,
        "input": opening.call.input,
        "input_hash": opening.input_hash,
        "side_effects": opening.side_effects,
        "rule": opening.rule,
    }
    if opening.verdict is not None:
        columns["verdict"] = opening.verdict
    if opening.rule and opening.rule.startswith("remembered:"):
        columns.update(decision="allow", via="remembered", decided_by=opening.remembered_by,
                       principal_id=opening.remembered_principal)
    return columns


def opened(ref: CallRef, opening: CallOpening, status: CallStatus) -> CallUpdate:
    """The row of a call in `status`, with everything classification decided."""
    return CallUpdate.of(ref, status=status, **opening_columns(opening))


def parked(ref: CallRef, info: ApprovalInfo, call_input: dict[str, Any]) -> CallUpdate:
    """The row of a call waiting for a human (written with its approval request)."""
    return CallUpdate.of(
        ref, status=CallStatus.PARKED, verdict="needs_approval", request_id=info.request_id,
        rule=info.rule, tool_name=info.tool_name, input=call_input,
        input_hash=info.input_hash, side_effects=info.side_effects,
    )


def running(ref: CallRef, started_at: datetime) -> CallUpdate:
    return CallUpdate.of(ref, status=CallStatus.RUNNING, started_at=started_at)


def ended(
    ref: CallRef,
    end: CallEnd,
    *,
    finished_at: datetime | None,
    started_at: datetime | None = None,
    request_id: str | None = None,
    full_output: dict[str, Any] | None = None,
) -> CallUpdate:
    """The final row: status, what the model got, timings."""
    return CallUpdate.of(
        ref, status=end.status, error_class=end.error_class, result=end.result,
        duration_ms=end.duration_ms or None, started_at=started_at, finished_at=finished_at,
        request_id=request_id, full_output=full_output,
    )


def decision_columns(approval: ApprovalRecord | None) -> dict[str, Any]:
    """The call row's copy of the approval's decision (only what is set)."""
    if approval is None or approval.decision is None:
        return {}
    fields = approval.row_fields()
    return {name: fields[name] for name in CALL_DECISION_FIELDS if fields[name] is not None}


def row_for(facts: CallFacts, approval: ApprovalRecord | None = None) -> CallUpdate:
    """The row update one record write makes: the facts, and the decision of
    the approval written with them."""
    row: dict[str, Any] = {"status": facts.status, "request_id": facts.request_id}
    if facts.opening is not None:
        row.update(opening_columns(facts.opening))
    row.update(decision_columns(approval))
    if facts.input is not None:
        row["input"] = facts.input
    if facts.input_hash is not None:
        row["input_hash"] = facts.input_hash
    if facts.end is not None:
        row.update(
            error_class=facts.end.error_class, result=facts.end.result,
            duration_ms=facts.end.duration_ms or None,
        )
    row.update(started_at=facts.started_at, finished_at=facts.finished_at,
               full_output=facts.full_output)
    return CallUpdate.of(facts.ref, **{k: v for k, v in row.items() if v is not None})


@overload
def merged(base: CallUpdate | None, top: CallUpdate) -> CallUpdate: ...


@overload
def merged(base: CallUpdate | None, top: CallUpdate | None) -> CallUpdate | None: ...


def merged(base: CallUpdate | None, top: CallUpdate | None) -> CallUpdate | None:
    """`base` with every field `top` sets (a later write's row over an earlier one's)."""
    if base is None or top is None:
        return base or top
    changes = {name: getattr(top, name) for name in CallUpdate.model_fields
               if getattr(top, name) is not None}
    return base.model_copy(update=changes)
