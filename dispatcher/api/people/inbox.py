"""The approver inbox's reading side: who is looking, and which parked calls
wait for them.

Two kinds of viewer: an API key with the approver role (signed in like the
audit pages; sees its project's requests it may decide, never the calls it
submitted unless the rule allows self-approval, and named-approver requests
only when the key maps to one of the approvers), and a named approver through
a personal inbox link (sees the requests that name them, in the projects they
approve for: `approvers.<name>.projects`).
The same `refusal` rules as the API and the approval links decide visibility,
so an item shown is an item its viewer may decide.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from parkgate.api.shared import oidc_sessions
from parkgate.api.shared.approval_links import (
    named_approvers,
    quorum_of,
    refusal,
    self_approval_of,
    submitter_of,
)
from parkgate.api.shared.budget_view import budget_lines
from parkgate.api.shared.views import diff_lines, expires_text, fmt_dt, fmt_span, pretty_json
from parkgate.approvals import identity
from parkgate.approvals.access import Principal, approver_for
from parkgate.approvals.decisions import DecideInput
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.durable.call_errors import TEMPORAL_NO_ANSWER
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallRecord

if TYPE_CHECKING:
    from parkgate.api.shared.service import CallService

SIDE_EFFECTS = ("none", "read", "write", "execute", "network")
#: At most this many items on one page (newest first); the rest wait their turn.
LIMIT = 100


@dataclass(frozen=True)
class Viewer:
    """A signed-in approver key, or a named approver holding a personal link."""

    principal: Principal | None = None
    approver: str | None = None
    token: str | None = None

    @property
    def base(self) -> str:
        """The inbox URL path this viewer uses (the token is the credential)."""
        return f"/inbox/p/{self.token}" if self.token else "/inbox"

    @property
    def csrf_purpose(self) -> str:
        if self.principal is not None:
            return f"inbox:{self.principal.principal_id}"
        return f"inbox:approver:{self.approver}"

    @property
    def label(self) -> str:
        if self.principal is not None:
            return self.principal.name
        return str(self.approver)


@dataclass(frozen=True)
class Filters:
    project: str | None = None
    session_id: str | None = None
    tool_name: str | None = None
    side_effects: str | None = None

    def params(self) -> dict[str, str]:
        return {k: v for k, v in {
            "project": self.project, "session_id": self.session_id,
            "tool_name": self.tool_name, "side_effects": self.side_effects,
        }.items() if v}


@dataclass
class Waiting:
    """One request waiting for the viewer."""

    approval: ApprovalRecord
    project: str
    #: The named approver the viewer acts as (None: a key on a plain request).
    acting_as: str | None
    self_approved: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _side_effects(approval: ApprovalRecord) -> str:
    return str((approval.info or {}).get("side_effects") or "")


async def waiting_for(
    repo: Repository, settings: Settings, viewer: Viewer, filters: Filters, now: datetime
) -> list[Waiting]:
    """The requests `viewer` may decide now, newest first, filtered."""
    project = viewer.principal.project if viewer.principal is not None else filters.project
    if viewer.principal is not None and viewer.principal.projects is not None:
        # A signed-in person: the projects their groups grant (one, or a chosen one).
        scope = viewer.principal.projects
        project = (filters.project if filters.project and viewer.principal.sees(filters.project)
                   else scope[0] if len(scope) == 1 and scope[0] != "*" else None)
    rows = await repo.waiting_approvals(
        project=project, session_id=filters.session_id, tool_name=filters.tool_name,
        limit=LIMIT * 2,
    )
    keys = settings.approver_keys()
    out: list[Waiting] = []
    for approval, project_name, status, submitter in rows:
        if approval.expires_at is not None and _aware(approval.expires_at) <= now:
            continue
        if filters.side_effects and _side_effects(approval) != filters.side_effects:
            continue
        if not await _still_waiting(repo, approval, status):
            continue
        named = named_approvers(approval)
        if viewer.principal is not None and not viewer.principal.sees(project_name):
            continue
        if viewer.principal is not None:
            if submitter is None and (approval.info or {}).get("parent_tool_use_id"):
                submitter = await submitter_of(repo, approval)  # a step: its parent's
            if refusal(settings, viewer.principal, approval, submitter) is not None:
                continue
            acting = approver_for(viewer.principal, named, keys) if named else None
            selfish = submitter is not None and submitter.key_id == viewer.principal.key_id
            out.append(Waiting(approval, project_name, acting,
                               self_approved=selfish and self_approval_of(approval)))
        elif viewer.approver in named and settings.approver_decides_in(
            viewer.approver, project_name
        ):
            out.append(Waiting(approval, project_name, viewer.approver))
        if len(out) >= LIMIT:
            break
    return out


async def _still_waiting(
    repo: Repository, approval: ApprovalRecord, status: CallStatus | None
) -> bool:
    """The call (or, for a composed tool's step, its parent) has not ended."""
    if status is not None:
        return status == CallStatus.PARKED
    parent = (approval.info or {}).get("parent_tool_use_id")
    if not parent:
        return True  # the row trails the approval by a moment
    row = await repo.get_call(approval.session_id, str(parent))
    return row is None or not row.status.terminal


def signature(items: list[Waiting]) -> str:
    """Changes whenever the set of waiting requests changes (the live page's cue)."""
    ids = ",".join(sorted(w.approval.request_id for w in items))
    return hashlib.sha256(ids.encode()).hexdigest()[:16]


def call_key(approval: ApprovalRecord) -> tuple[str, str]:
    """The call row an item shows: its own, or a composed tool's parent call."""
    parent = (approval.info or {}).get("parent_tool_use_id") or None
    return approval.session_id, str(parent or approval.tool_use_id)


async def present(repo: Repository, item: Waiting, now: datetime,
                  votes: list[str],
                  calls: Mapping[tuple[str, str], CallRecord] | None = None) -> dict[str, Any]:
    """What the page shows for one item (the approval page's facts and diff);
    `calls`, the page's call rows read at once (see CallStore.get_calls)."""
    approval = item.approval
    info = approval.info or {}
    parent = info.get("parent_tool_use_id") or None
    key = call_key(approval)
    call = calls.get(key) if calls is not None else await repo.get_call(*key)
    args = info.get("input") if parent else (call.input if call is not None else None)
    requested = _aware(approval.requested_at)
    return {
        "request_id": approval.request_id,
        "tool_name": approval.tool_name,
        "tool_use_id": approval.tool_use_id,
        "session_id": approval.session_id,
        "project": item.project,
        "side_effects": _side_effects(approval) or (call.side_effects if call else "") or "",
        "client_executed": bool((approval.info or {}).get("client_executed")),
        "rule": info.get("rule") or (call.rule if call else None),
        "budgets": [] if parent else await budget_lines(repo, *key),
        "requested_at_iso": requested.isoformat(),
        "requested_at_text": fmt_dt(requested),
        "age": fmt_span((now - requested).total_seconds()),
        "expires_text": expires_text(approval.expires_at, now),
        "impact": list(info.get("projected_impact") or []),
        "diff_lines": diff_lines(info.get("diff")),
        "files": list(info.get("files") or []),
        "sub_tools": list(info.get("sub_tools") or []),
        "args_pretty": pretty_json(args) if args is not None
        else str(info.get("input_summary", "")),
        "parent_tool_use_id": parent,
        "named": named_approvers(approval),
        "quorum": quorum_of(approval),
        "votes": votes,
        "acting_as": item.acting_as,
        "used": item.acting_as is not None and item.acting_as in votes,
        "self_approved": item.self_approved,
    }


async def votes(service: CallService, item: Waiting) -> list[str]:
    """Named approvers who allowed so far (the workflow holds them while parked)."""
    approval = item.approval
    if not (approval.info or {}).get("approvers"):
        return []
    try:
        view = await service.query(approval.session_id, approval.tool_use_id)
    except TEMPORAL_NO_ANSWER:
        return []
    return list(view.votes) if view is not None else []


async def visible(repo: Repository, settings: Settings, viewer: Viewer,
                  approval: ApprovalRecord, now: datetime) -> Waiting | None:
    """The request as an inbox item of `viewer`, when it may decide it now."""
    filters = Filters(session_id=approval.session_id, tool_name=approval.tool_name)
    for item in await waiting_for(repo, settings, viewer, filters, now):
        if item.approval.request_id == approval.request_id:
            return item
    return None


def decide_input(viewer: Viewer, item: Waiting, decision: str, reason: str | None,
                 edited: dict[str, Any] | None,
                 person: oidc_sessions.Person | None = None) -> DecideInput:
    """The decision as `viewer` makes it: who decides, through what, with which identity."""
    approval = item.approval
    if viewer.principal is None and person is not None:
        # A personal link used by its named approver, signed in (link_decisions: signin).
        who = person.oidc
        return DecideInput(
            request_id=approval.request_id, decision=decision, reason=reason,
            decided_by=viewer.approver, via="inbox", edited_input=edited,
            principal_id=person.principal.principal_id, approver=viewer.approver,
            identity=identity.oidc(who["issuer"], who["subject"], who.get("email"),
                                   link="personal", approver=viewer.approver),
        )
    if viewer.principal is not None:
        key = viewer.principal
        if key.oidc is not None:
            who = identity.oidc(key.oidc["issuer"], key.oidc["subject"], key.oidc.get("email"),
                                approver=item.acting_as)
        else:
            who = identity.key(key.key_id, key.name)
        return DecideInput(
            request_id=approval.request_id, decision=decision, reason=reason,
            decided_by=(item.acting_as or key.name) if key.oidc is not None else key.name,
            via="inbox", edited_input=edited,
            principal_id=key.principal_id, self_approved=item.self_approved,
            approver=item.acting_as, identity=who,
        )
    return DecideInput(
        request_id=approval.request_id, decision=decision, reason=reason,
        decided_by=viewer.approver, via="inbox", edited_input=edited,
        principal_id=f"approver:{viewer.approver}", approver=viewer.approver,
        identity=identity.personal_link(str(viewer.approver)),
    )
