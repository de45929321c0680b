"""Re-deriving approval links on read.

The store keeps only a token's hash; signing is deterministic for
(request id, expiry), so any reader with the secret rebuilds the link and
checks it against the stored hash instead of storing the token itself.
"""

from __future__ import annotations

from typing import Protocol

from parkgate.approvals.access import DEFAULT_PROJECT, Principal, Role, Submitter, may_decide
from parkgate.approvals.links import approval_url, sign_personal_token, sign_token, token_hash
from parkgate.calls.records import ApprovalRecord
from parkgate.settings import Settings
from parkgate.store.repository import Repository


class _HasRequest(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def request_id(self) -> str | None: ...


def link_for(settings: Settings, secret: str, approval: ApprovalRecord) -> str | None:
    """The approval URL of a stored request, or None if it does not match the hash."""
    token = sign_token(secret, approval.request_id, approval.expires_at)
    if token_hash(token) != approval.token_hash:
        return None
    return approval_url(
        settings.public_base_url, secret, approval.request_id, approval.expires_at
    )


async def approval_link(
    repo: Repository, settings: Settings, secret: str, event: _HasRequest
) -> str | None:
    """The link for a tool.confirmation_requested event (None for other events)."""
    if event.type != "tool.confirmation_requested" or not event.request_id:
        return None
    approval = await repo.get_approval(event.request_id)
    return None if approval is None else link_for(settings, secret, approval)


def _base(settings: Settings) -> str:
    return f"{settings.public_base_url.rstrip('/')}/approve/"


def named_approvers(approval: ApprovalRecord) -> list[str]:
    """The named approvers of a request (empty: any approver key or the generic link)."""
    names = (approval.info or {}).get("approvers") or []
    return [str(n) for n in names]


def quorum_of(approval: ApprovalRecord) -> int:
    value = (approval.info or {}).get("quorum") or 1
    return int(value) if isinstance(value, int) else 1


def self_approval_of(approval: ApprovalRecord) -> bool:
    return bool((approval.info or {}).get("self_approval"))


def personal_link(settings: Settings, secret: str, approval: ApprovalRecord, name: str) -> str:
    """One named approver's own link (derived on read, never stored)."""
    token = sign_personal_token(secret, approval.request_id, approval.expires_at, name)
    return _base(settings) + token


def personal_links(settings: Settings, secret: str, approval: ApprovalRecord) -> dict[str, str]:
    return {n: personal_link(settings, secret, approval, n) for n in named_approvers(approval)}


def refusal(
    settings: Settings, principal: Principal, approval: ApprovalRecord,
    submitter: Submitter | None,
) -> str | None:
    """Why this key may not decide this request (None when it may)."""
    return may_decide(
        principal, submitter, self_approval=self_approval_of(approval),
        approvers=named_approvers(approval), approver_keys=settings.approver_keys(),
    )


def link_for_principal(
    settings: Settings, secret: str, principal: Principal, approval: ApprovalRecord,
    submitter: Submitter | None,
) -> str | None:
    """The approval link this key may be handed, or None.

    Only a key that may decide gets the generic link. A request with named
    approvers has no generic link: its approvers get personal links through
    notifications (admins see them in `approver_links`), and keys mapped to an
    approver decide through the API.
    """
    if named_approvers(approval) or refusal(settings, principal, approval, submitter):
        return None
    return link_for(settings, secret, approval)


def links_for_admin(
    settings: Settings, secret: str, principal: Principal, approval: ApprovalRecord
) -> dict[str, str] | None:
    """Named approvers' personal links: admins only."""
    if not principal.has(Role.ADMIN) or not named_approvers(approval):
        return None
    return personal_links(settings, secret, approval)


async def visible_approval_link(
    repo: Repository, settings: Settings, secret: str, principal: Principal, event: _HasRequest
) -> str | None:
    """The link of a tool.confirmation_requested event, if this key may decide."""
    if event.type != "tool.confirmation_requested" or not event.request_id:
        return None
    approval = await repo.get_approval(event.request_id)
    if approval is None:
        return None
    submitter = await submitter_of(repo, approval)
    return link_for_principal(settings, secret, principal, approval, submitter)


async def submitter_of(repo: Repository, approval: ApprovalRecord) -> Submitter | None:
    """The key that submitted the call this request belongs to (a composed
    tool's sub-call belongs to its parent's submission)."""
    parent = (approval.info or {}).get("parent_tool_use_id")
    return await repo.get_submitter(approval.session_id, str(parent or approval.tool_use_id))


async def project_of(repo: Repository, approval: ApprovalRecord) -> str:
    """The project a request belongs to: its session's (a call without a
    registered session, from an embedded dispatcher, is the default project's)."""
    session = await repo.get_session(approval.session_id)
    return session.project if session is not None else DEFAULT_PROJECT


def not_your_project(approver: str) -> str:
    """What Slack and personal links tell a named approver outside the request's
    project (which project is not said)."""
    return (f"This request belongs to a project {approver} does not approve for "
            f"(approvers.{approver}.projects); nothing was decided.")
