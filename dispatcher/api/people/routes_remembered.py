"""Remembered decisions under /v1/remembered: list (project-scoped) and revoke.

Rules are created by an allow with `remember` (the confirmation API, the
approval page); see parkgate.rules.remembered.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from parkgate.api.shared.deps import ReaderDep, RepoDep
from parkgate.api.shared.errors import ApiError, error_responses, not_found
from parkgate.api.shared.schemas import RememberedListOut, RememberedOut
from parkgate.approvals.access import Role
from parkgate.models import utcnow
from parkgate.rules.remembered import RememberedRule

router = APIRouter(prefix="/v1", tags=["remembered"])


def remembered_out(rule: RememberedRule) -> RememberedOut:
    data = rule.model_dump(exclude={"rule_id", "project"})
    return RememberedOut(id=rule.rule_id, rule=rule.label, active=rule.active(utcnow()), **data)


@router.get(
    "/remembered",
    response_model=RememberedListOut,
    responses=error_responses(401, 403, 422, 429),
    summary="Remembered decisions of this key's project (active ones unless all=true)",
)
async def list_remembered(
    repo: RepoDep,
    key: ReaderDep,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    workspace: Annotated[str | None, Query(max_length=4096)] = None,
    all: Annotated[bool, Query(description="include revoked and expired rules")] = False,
) -> RememberedListOut:
    rules = await repo.list_remembered(
        project=key.project, session_id=session_id, workspace_path=workspace,
        include_inactive=all, now=utcnow(),
    )
    return RememberedListOut(items=[remembered_out(r) for r in rules])


@router.delete(
    "/remembered/{rule_id}",
    response_model=RememberedOut,
    responses=error_responses(401, 403, 404, 429),
    summary="Revoke a remembered decision (approver or admin)",
)
async def revoke_remembered(
    rule_id: Annotated[str, PathParam(max_length=40)],
    repo: RepoDep,
    key: ReaderDep,
) -> RememberedOut:
    if not key.has(Role.APPROVER, Role.ADMIN):
        raise ApiError(403, "forbidden",
                       f"API key {key.name!r} lacks the approver or admin role for this request",
                       {"required_roles": ["approver", "admin"], "roles": key.roles})
    rule = await repo.get_remembered(rule_id)
    if rule is None or rule.project != key.project:
        raise not_found(f"remembered rule {rule_id!r}")
    revoked = await repo.revoke_remembered(rule_id, by=key.name, now=utcnow())
    assert revoked is not None
    return remembered_out(revoked)
