"""Approval requests of composed tools' sub-calls on the durable path.

A non-atomic composed tool runs in the execute activity; when one of its
sub-calls needs approval the run stops there (activities/subcall_gate.py) and
the call's workflow starts a SubCallApproval child workflow for it
(workflows/subcall_park.py), whose id is the sub-call's own call id
(`call_workflow_id(session, "<parent>.<n>")`). The request is stored and
decided like any call's: the API sends the proven `decide` update
to that workflow, which accepts the first decision or its expiry, whichever
it commits first, and tells every later caller the truth. This module holds
the pure parts both sides share: how a sub-call request is named and
recognised, and which decisions it takes.
"""

from __future__ import annotations

import hashlib

from parkgate.approvals.decisions import (
    DecideInput,
    DecisionRecord,
    Rejection,
    RejectReason,
    already_decided,
    invalid_decision,
    no_longer_waiting,
)
from parkgate.calls.records import ApprovalRecord
from parkgate.verdicts import ApprovalInfo

#: Decisions a human may give a sub-call (no edits: see docs/DURABLE.md).
SUB_CALL_DECISIONS = ("allow", "deny")
#: Stored when no decision arrived in time (same word as a parked call's expiry).
EXPIRED = "expired"
#: Text of a decision refused because it carries edits.
NO_EDITS = (
    "allow_with_edits is not available for a step of a composed tool; "
    "approve or deny it (or deny and let the agent retry with other input)"
)


def sub_call_request_id(session_id: str, tool_use_id: str) -> str:
    """The one request id of a sub-call's approval (deterministic: a retried
    store write or a re-run of the same sub-call finds the same request)."""
    raw = f"parkgate.subcall\x1f{session_id}\x1f{tool_use_id}"
    return "sub-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:28]


def parent_of(record: ApprovalRecord) -> str | None:
    """The parent call's tool_use_id when `record` is a sub-call's request."""
    parent = (record.info or {}).get("parent_tool_use_id")
    return parent if isinstance(parent, str) and parent else None


def problem(
    info: ApprovalInfo, status: str, decided: DecisionRecord | None, inp: DecideInput
) -> Rejection | None:
    """Why `inp` cannot decide the sub-call request `info` (None when it can);
    pure: the SubCallApproval workflow's validator. `status` is the request's
    ("parked" while it waits), `decided` the decision that won, if any.

    Same reasons and wording as the call workflow's `decide` validator.
    """
    if inp.request_id != info.request_id:
        return Rejection(RejectReason.UNKNOWN_REQUEST,
                         f"unknown request id {inp.request_id!r} for this call")
    if decided is not None:
        return already_decided(decided.decision, decided.decided_by)
    if status != "parked":
        return no_longer_waiting(status)
    if inp.decision == "allow_with_edits":
        return Rejection(RejectReason.EDITS_UNAVAILABLE, NO_EDITS)
    if inp.decision not in SUB_CALL_DECISIONS:
        return invalid_decision(inp.decision)
    if inp.edited_input is not None:
        return Rejection(RejectReason.EDITS_NOT_ALLOWED,
                         "edited_input is only allowed with allow_with_edits")
    return _named_problem(info, inp)


def _named_problem(info: ApprovalInfo, inp: DecideInput) -> Rejection | None:
    """A step with named approvers takes one of them; a quorum above one is not
    counted for steps (the decision is refused, so the step can only expire or
    be denied: never run on fewer approvals than configured)."""
    named = list(info.approvers)
    if not named:
        return None
    if inp.approver not in named:
        return Rejection(RejectReason.NOT_A_NAMED_APPROVER,
                         "this request is decided by its named approvers: " + ", ".join(named))
    if inp.decision != "deny" and info.quorum > 1:
        return Rejection(RejectReason.QUORUM_UNSUPPORTED,
                         f"a step of a composed tool cannot collect {info.quorum} approvals; "
                         "deny it, or let it expire")
    return None
