"""Counting named approvers' votes on a quorum request (pure, used by the workflow).

A request with named approvers runs when `quorum` distinct approvers have
allowed it; any deny from one of them denies it at once; the same approver
twice counts once. Requests without named approvers are decided by the first
decision, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from parkgate.approvals.decisions import Rejection, RejectReason


def vote_problem(
    approvers: Sequence[str], quorum: int, votes: Sequence[str], approver: str | None,
    decision: str,
) -> Rejection | None:
    """Why this vote cannot count (None when it can)."""
    if not approvers:
        return None
    if approver is None or approver not in approvers:
        return Rejection(RejectReason.NOT_A_NAMED_APPROVER,
                         "this request is decided by its named approvers: " + ", ".join(approvers))
    if approver in votes:
        return Rejection(RejectReason.QUORUM_DUPLICATE,
                         f"{approver} has already approved ({len(votes)} of {quorum} approvals)")
    if decision == "allow_with_edits" and quorum > 1:
        return Rejection(
            RejectReason.EDITS_UNAVAILABLE,
            "allow_with_edits is not available for a request that needs several approvals",
        )
    return None


def count(votes: Sequence[str], approver: str | None, decision: str) -> list[str]:
    """The votes after this decision (a deny adds nothing: it decides)."""
    out = list(votes)
    if decision != "deny" and approver is not None and approver not in out:
        out.append(approver)
    return out


def decides(approvers: Sequence[str], quorum: int, votes: Sequence[str], decision: str) -> bool:
    """Whether the request is decided now: no named approvers, a deny, or quorum met."""
    return not approvers or decision == "deny" or len(set(votes)) >= quorum
