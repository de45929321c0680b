"""What a call's recorded history must mean, beyond an intact hash chain.

A chain proves nobody edited the events; it cannot prove the events tell a
true story. These checks catch the stories that cannot have happened: two
resolutions of one request, a resolution that disagrees with the approval
row or the call row, a tool that ran after a denial, a call that both failed
and completed, or ran twice. Pure functions over stored rows (no I/O).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from parkgate.approvals import identity as identities

TERMINAL = frozenset({"succeeded", "failed", "denied", "expired", "cancelled",
                      "outcome_unknown", "unclaimed"})
#: Events of a client-executed call that happen at most once (a claim may be
#: taken again after its reservation lapsed or was taken over; it starts once).
_ONCE = ("tool.released", "tool.claim_started", "tool.outcome_reported",
         "tool.lease_expired", "tool.outcome_late", "tool.unclaimed")
#: Decisions after which the tool must not run.
STOPPING = frozenset({"deny", "expired", "cancelled", "timeout"})


class MeaningProblem(BaseModel):
    """One violation, named with its call."""

    session_id: str
    tool_use_id: str
    detail: str

    def describe(self) -> str:
        return f"session {self.session_id} call {self.tool_use_id}: {self.detail}"


def check_call(
    session_id: str,
    tool_use_id: str,
    events: Sequence[Mapping[str, Any]],
    call: Mapping[str, Any] | None,
    approvals: Mapping[str, Mapping[str, Any]],
) -> list[MeaningProblem]:
    """Violations of one call's events (in seq order) against its rows.

    `approvals` maps request_id -> approval row for the requests of this call.
    """
    found: list[str] = []
    types = Counter(str(e["type"]) for e in events)
    if types["tool.called"] > 1:
        found.append(f"tool.called recorded {types['tool.called']} times")
    if types["tool.failed"] and types["tool.completed"]:
        found.append("both tool.failed and tool.completed recorded")
    found.extend(_client_problems(types, call))

    resolved: dict[str, list[Mapping[str, Any]]] = {}
    stopped_by: str | None = None
    for event in events:
        kind = event["type"]
        data = event.get("data") or {}
        if kind == "tool.confirmation_resolved":
            resolved.setdefault(str(event.get("request_id")), []).append(event)
            if data.get("decision") in STOPPING and stopped_by is None:
                stopped_by = str(data.get("decision"))
        elif kind in ("tool.called", "tool.released") and stopped_by is not None:
            found.append(f"{kind} after the request was resolved as {stopped_by}")

    for request_id, items in resolved.items():
        if len(items) > 1:
            found.append(f"request {request_id}: {len(items)} confirmation_resolved events")
        data = items[0].get("data") or {}
        said = (data.get("decision"), data.get("decided_by"))
        approval = approvals.get(request_id)
        stored = (approval.get("decision"), approval.get("decided_by")) if approval else None
        # Expiry and cancellation are nobody's decision: the approval row may
        # stay undecided (a cancelled sub-call) or say the same.
        by_machine = said[0] in ("expired", "cancelled")
        found.extend(_identity_problems(request_id, data, approval, call))
        if approval is None or stored is None:
            found.append(f"request {request_id}: resolved but no approval row")
        elif (stored[0] not in (None, said[0])) if by_machine else stored != said:
            found.append(
                f"request {request_id}: event says {_who(*said)}, approval row says "
                f"{_who(*stored)}"
            )
        if call is not None and call.get("request_id") == request_id and call.get("decision"):
            row = (call.get("decision"), call.get("decided_by"))
            if row != said:
                found.append(
                    f"request {request_id}: event says {_who(*said)}, call row says {_who(*row)}"
                )
    finished = call is not None and call.get("status") in TERMINAL
    for request_id, approval in approvals.items():
        # A running call may be between its approval write and its event write.
        if finished and approval.get("decision") and request_id not in resolved:
            found.append(
                f"request {request_id}: approval row decided "
                f"{_who(approval.get('decision'), approval.get('decided_by'))} "
                "but no confirmation_resolved event"
            )
    if call is not None and call.get("status") == "succeeded" and stopped_by is not None:
        found.append(f"call row says succeeded after the request was resolved as {stopped_by}")
    return [MeaningProblem(session_id=session_id, tool_use_id=tool_use_id, detail=d) for d in found]


def _identity_problems(
    request_id: str, data: Mapping[str, Any], approval: Mapping[str, Any] | None,
    call: Mapping[str, Any] | None,
) -> list[str]:
    """How the decider was identified: well formed in the event, and the same
    on the approval row and the call row (rows written before identities were
    recorded have none and are not compared)."""
    said = data.get("identity")
    found = [f"request {request_id}: {p}" for p in identities.problems(
        said, data.get("principal_id"), data.get("decided_by"))]
    rows = [("approval row", approval)]
    if call is not None and call.get("request_id") == request_id:
        rows.append(("call row", call))
    for label, row in rows:
        if row is None or "identity" not in row:
            continue
        stored = row.get("identity")
        if stored is not None and stored != said:
            found.append(f"request {request_id}: event says the decider was identified by "
                         f"{identities.describe(said) or 'nothing'}, {label} says "
                         f"{identities.describe(stored)}")
        elif stored is None and said is not None and row.get("principal_id") is not None:
            found.append(f"request {request_id}: {label} lost how the decider was identified")
    return found


def _client_problems(types: Counter[str], call: Mapping[str, Any] | None) -> list[str]:
    """A client-executed call: released, started, reported at most once, claimed
    again only after a reservation lapsed or was taken over; an outcome or a
    lease end only after a claim, never both; outcome_unknown only after a
    lease end."""
    found = [f"{kind} recorded {types[kind]} times" for kind in _ONCE if types[kind] > 1]
    if types["tool.claim_started"] and not types["tool.claimed"]:
        found.append("a claim started without a claim")
    if (types["tool.claimed"] or types["tool.outcome_reported"]) and not types["tool.released"]:
        found.append("claimed or reported without a release")
    if (types["tool.outcome_reported"] or types["tool.lease_expired"]) \
            and not types["tool.claimed"]:
        found.append("an outcome or a lease end without a claim")
    if types["tool.outcome_reported"] and types["tool.lease_expired"]:
        found.append("both an outcome and a lease end recorded (a late report is outcome_late)")
    status = call.get("status") if call is not None else None
    if types["tool.outcome_late"] and not types["tool.lease_expired"] \
            and not (status == "cancelled" and types["tool.claimed"]):
        found.append("a late outcome without a lease end (or a cancel of a claimed call)")
    if status == "outcome_unknown" and not types["tool.lease_expired"]:
        found.append("call row says outcome_unknown but no tool.lease_expired")
    if types["tool.unclaimed"] and (types["tool.claimed"] or not types["tool.released"]):
        found.append("tool.unclaimed beside a claim, or without a release")
    if status == "unclaimed" and not types["tool.unclaimed"]:
        found.append("call row says unclaimed but no tool.unclaimed")
    if types["tool.released"] and status in ("succeeded", "failed") \
            and not types["tool.outcome_reported"]:
        found.append(f"call row says {status} but its client reported no outcome")
    return found


def _who(decision: Any, decided_by: Any) -> str:
    return f"{decision} by {decided_by}" if decided_by else str(decision)
