"""What the approval page shows: the request, its arguments and diff, its state,
who decided; read from the store (and, for a quorum's tally, the workflow).

routes_approve.py routes and decides; it renders with these facts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request

from parkgate.api.shared import oidc_sessions
from parkgate.api.shared.approval_links import named_approvers, quorum_of, refusal, submitter_of
from parkgate.api.shared.budget_view import budget_lines
from parkgate.api.shared.service import CallService
from parkgate.api.shared.views import diff_lines, expires_text, fmt_dt, pretty_json
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER
from parkgate.models import utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.workspaces.diffing import unified_diff

_DECISION_WORDS = {
    "allow": ("Approved", "approved"),
    "allow_with_edits": ("Approved with edits", "approved with edits"),
    "deny": ("Denied", "denied"),
    "expired": ("Expired", "expired"),
}


#: Durations the approval page offers for "remember this decision".
REMEMBER_TTLS: tuple[tuple[int, str], ...] = (
    (3600, "1 hour"), (8 * 3600, "8 hours"), (24 * 3600, "1 day"), (7 * 24 * 3600, "7 days"),
)


def _who(approval: ApprovalRecord) -> str:
    """The decider as the audit knows it: the authenticated name, else the claim."""
    if approval.decided_by:
        return approval.decided_by
    if approval.claimed_name:
        return f"{approval.claimed_name} (name given on the link, not verified)"
    return "someone"


async def _votes(request: Request, approval: ApprovalRecord) -> list[str]:
    """Named approvers who have allowed so far (from the workflow while parked)."""
    if approval.votes:
        return list(approval.votes)
    if not named_approvers(approval) or approval.decision is not None:
        return []
    service: CallService = request.app.state.calls
    try:
        view = await service.query(approval.session_id, approval.tool_use_id)
    except TEMPORAL_NO_ANSWER:  # no worker answers: the page renders without the tally
        return []
    return list(view.votes) if view is not None else []


def _expired(approval: ApprovalRecord, now: datetime) -> bool:
    exp = approval.expires_at
    if exp is None:
        return False
    if exp.tzinfo is None:
        exp = exp.replace(tzinfo=UTC)
    return now >= exp


def is_expired(approval: ApprovalRecord, now: datetime) -> bool:
    """Expired without a decision (recorded as such, or past its expiry)."""
    if approval.decision == "expired":
        return True
    return approval.decision is None and _expired(approval, now)


def decided_block(approval: ApprovalRecord, *, you: bool = False) -> dict[str, Any] | None:
    if approval.decision is None:
        return None
    title, verb = _DECISION_WORDS.get(approval.decision, (approval.decision, approval.decision))
    if approval.decision == "expired":
        text = f"No decision arrived before {fmt_dt(approval.decided_at)}; the call did not run."
    else:
        who = "You" if you else _who(approval)
        via = f" via {approval.via}" if approval.via and not you else ""
        text = f"{who} {verb} this call{via} at {fmt_dt(approval.decided_at)}."
    return {"decision": approval.decision, "title": title, "text": text,
            "reason": approval.reason}


def _edit_of(
    approval: ApprovalRecord, call_input: Any, edited_input: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The arguments as an approver edited them, once decided with edits: the
    decision's own (just posted), else the call row's (which records the edit)."""
    if edited_input is not None:
        return edited_input
    if approval.decision == "allow_with_edits" and isinstance(call_input, dict):
        return call_input
    return None


def _decided_text(approval: ApprovalRecord) -> str | None:
    """'decided by alice at ...' for a decided request (None while it waits)."""
    if approval.decision is None or approval.decision == "expired":
        return None
    return f"decided by {_who(approval)} at {fmt_dt(approval.decided_at)}"


async def page_context(
    request: Request, approval: ApprovalRecord, approver: str | None = None,
    edited_input: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the page shows. After an edit: the edited arguments, the diff of the
    edit (the original arguments are kept with the request), no expiry."""
    repo: Repository = request.app.state.deps.repo
    info = approval.info or {}
    call = await repo.get_call(approval.session_id, approval.tool_use_id)
    parent_id = info.get("parent_tool_use_id") or None
    if call is None and parent_id:
        # A composed tool's sub-call has no row: it lives and ends with its parent.
        call = await repo.get_call(approval.session_id, str(parent_id))
        args_source = info.get("input")
    else:
        args_source = call.input if call is not None else None
    session = await repo.get_session(approval.session_id)
    person = await person_for(request, approval, approver)
    edit = _edit_of(approval, args_source, edited_input)
    original = info.get("input") if edit is not None else None
    if edit is not None and original is None and edited_input is not None:
        original = args_source  # the row before the decision is recorded
    args: Any = edit if edit is not None else args_source
    args_pretty = pretty_json(args) if args is not None else str(info.get("input_summary", ""))
    if edit is None:
        diff = diff_lines(info.get("diff"))
    elif original is not None:  # the file preview described the original: show the edit
        diff = diff_lines(unified_diff(pretty_json(original) + "\n", args_pretty + "\n",
                                       "arguments"))
    else:
        diff = []
    now = utcnow()
    return {
        "a": {
            "tool_name": approval.tool_name,
            "tool_use_id": approval.tool_use_id,
            "session_id": approval.session_id,
            "side_effects": info.get("side_effects") or (call.side_effects if call else "") or "",
            "rule": info.get("rule") or (call.rule if call else None),
            "requested_at_iso": approval.requested_at.isoformat(),
            "requested_at_text": fmt_dt(approval.requested_at),
            "expires_text": expires_text(approval.expires_at, now),
            "decided_text": _decided_text(approval),
            "edited": edit is not None,
            "workspace": session.workspace_path if session else None,
            "impact": list(info.get("projected_impact") or []),
            "diff_lines": diff,
            "args_pretty": args_pretty,
            "sub_tools": list(info.get("sub_tools") or []),
            "files": list(info.get("files") or []),
            "parent_tool_use_id": parent_id,
            "parent_tool_name": call.tool_name if parent_id and call is not None else None,
            "client_executed": bool(info.get("client_executed")),
            "budgets": await budget_lines(repo, approval.session_id, approval.tool_use_id),
        },
        "call_status": call.status if call else None,
        "as_approver": approver,
        "signed_in_as": person.principal.name if person is not None else None,
        "named": named_approvers(approval),
        "quorum": quorum_of(approval),
        "votes": await _votes(request, approval),
        # Only an authenticated decider (a personal link) may leave a standing
        # rule behind; not for quorum requests or a composed tool's sub-calls.
        "can_remember": approver is not None and quorum_of(approval) == 1 and not parent_id,
        "remember_ttls": REMEMBER_TTLS,
    }


def state_of(
    approval: ApprovalRecord, call_status: CallStatus | None, now: datetime
) -> tuple[str, str]:
    if approval.decision is not None:
        title, _ = _DECISION_WORDS.get(approval.decision, (approval.decision, ""))
        return ("allowed" if approval.decision.startswith("allow") else
                "expired" if approval.decision == "expired" else "denied"), title
    if _expired(approval, now):
        return "expired", "Expired"
    if call_status is not None and call_status != CallStatus.PARKED and call_status.terminal:
        return "closed", f"No longer waiting (the call is {call_status.value})"
    return "pending", "Waiting for a decision"


async def person_for(
    request: Request, approval: ApprovalRecord, link_approver: str | None
) -> oidc_sessions.Person | None:
    """The signed-in person who decides through this link: the named approver
    a personal link is for, or for a generic link an approver who may decide
    this request. Anyone else signed in decides as the link alone would."""
    person = oidc_sessions.signed_in(request)
    if person is None:
        return None
    if link_approver is not None:
        return person if person.principal.approver == link_approver else None
    settings: Settings = request.app.state.settings
    repo: Repository = request.app.state.deps.repo
    session = await repo.get_session(approval.session_id)
    if session is None or not person.principal.sees(session.project):
        return None  # another project's request: their groups grant nothing there
    submitter = await submitter_of(repo, approval)
    return person if refusal(settings, person.principal, approval, submitter) is None else None
