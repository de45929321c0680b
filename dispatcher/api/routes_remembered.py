"""Remembered decisions under /v1/remembered: list (project-scoped) and revoke.

Rules are created by an allow with `remember` (the confirmation API, the
approval page); see parkgate.rules.remembered.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from parkgate.api.deps import ReaderDep, RepoDep
from parkgate.api.errors import ApiError, error_responses, not_found
from parkgate.api.schemas import RememberedListOut, RememberedOut
from parkgate.approvals.access import Role
from parkgate.models import utcnow
from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.remembered import RememberedRule, check_remember
from parkgate.store.repository import Repository

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


async def remember_spec(
    repo: Repository, *, scope: str, ttl_seconds: int, command_prefix: str | None,
    decision: str, quorum: int, sub_call: bool, session_id: str, tool_use_id: str,
    edited_input: dict[str, object] | None, approver: str | None,
) -> RememberSpec:
    """The RememberSpec of a decision, or a 422 saying why it cannot be remembered.

    Only allows are remembered; quorum requests are refused (one approver
    cannot stand for the several the rule asks for).
    """
    if decision == "deny":
        raise ApiError(422, "invalid_remember", "remember is only for allow decisions")
    if sub_call:
        raise ApiError(422, "invalid_remember",
                       "remember is not available for a composed tool's sub-calls")
    if quorum > 1:
        raise ApiError(422, "invalid_remember",
                       "remember is not available for requests that need a quorum of approvers")
    try:
        spec = RememberSpec.model_validate({"scope": scope, "ttl_seconds": ttl_seconds,
                                            "command_prefix": command_prefix,
                                            "approver": approver})
    except ValueError as exc:
        raise ApiError(422, "invalid_remember", f"remember: {exc}") from None
    tool_input = edited_input
    if tool_input is None:
        call = await repo.get_call(session_id, tool_use_id)
        tool_input = call.input if call is not None and call.input is not None else {}
    problem = check_remember(spec, dict(tool_input))
    if problem is not None:
        raise ApiError(422, "invalid_remember", problem)
    return spec
