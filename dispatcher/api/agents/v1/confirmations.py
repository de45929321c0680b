"""/v1 confirmations: decide a parked call (first decision wins)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response

from parkgate.api.agents.v1.common import (
    RequestId,
    SessionId,
    TurnId,
    call_service,
    reject_too_deep,
    reject_unencodable,
    session_of,
)
from parkgate.api.shared import metrics
from parkgate.api.shared.approval_links import (
    named_approvers,
    quorum_of,
    refusal,
    self_approval_of,
    submitter_of,
)
from parkgate.api.shared.decisions import answer_refused, outcome
from parkgate.api.shared.deps import (
    ApproverDep,
    RepoDep,
    SettingsDep,
)
from parkgate.api.shared.errors import ApiError, ErrorResponse, error_responses, not_found
from parkgate.api.shared.remember_checks import remember_spec
from parkgate.api.shared.schemas import (
    ConfirmationIn,
    ConfirmationOut,
    DecisionOut,
)
from parkgate.approvals import identity
from parkgate.approvals.access import Principal, approver_for, is_self
from parkgate.approvals.decisions import DecideInput

router = APIRouter(prefix="/v1", tags=["agent"])


@router.post(
    "/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}",
    response_model=ConfirmationOut,
    responses={202: {"model": ConfirmationOut,
                     "description": "Approval counted toward a quorum not yet met"},
               409: {"model": ErrorResponse,
                     "description": "Someone decided first (error.details.winner), "
                     "or the call is no longer waiting"},
               **error_responses(401, 403, 404, 413, 422, 429)},
    summary="Decide a parked call (first decision wins)",
)
async def confirm(
    session_id: SessionId,
    turn_id: TurnId,
    request_id: RequestId,
    body: ConfirmationIn,
    request: Request,
    repo: RepoDep,
    settings: SettingsDep,
    key: ApproverDep,
    response: Response,
) -> ConfirmationOut:
    if body.edited_input is not None:
        reject_too_deep(body.edited_input, settings.max_input_depth, "body.edited_input")
    reject_unencodable(body.model_dump(), ["body"])
    # Independent reads, in parallel: the decision's latency is a human's wait.
    _, approval = await asyncio.gather(
        session_of(repo, session_id, key), repo.get_approval(request_id)
    )
    if approval is None or approval.session_id != session_id or approval.turn_id != turn_id:
        raise not_found(f"approval request {request_id!r}")
    submitter = await submitter_of(repo, approval)
    why = refusal(settings, key, approval, submitter)
    if why is not None:
        raise ApiError(403, "forbidden", why)
    named = named_approvers(approval)
    acting_as = approver_for(key, named, settings.approver_keys()) if named else None
    remember = None
    if body.remember is not None:
        remember = await remember_spec(
            repo, **body.remember.model_dump(), decision=body.decision,
            quorum=quorum_of(approval), session_id=session_id,
            sub_call=bool((approval.info or {}).get("parent_tool_use_id")),
            tool_use_id=approval.tool_use_id, edited_input=body.edited_input,
            approver=acting_as,
        )
    # The key is the decider; a `decided_by` in the body is only a claim.
    claimed = body.decided_by.strip() if body.decided_by else None
    result = await call_service(request).decide(
        session_id,
        approval.tool_use_id,
        DecideInput(
            request_id=request_id,
            decision=body.decision,
            reason=body.reason,
            decided_by=key.name,
            via="api",
            edited_input=body.edited_input,
            principal_id=key.principal_id,
            claimed_name=claimed if claimed and claimed != key.name else None,
            self_approved=is_self(key, submitter) and self_approval_of(approval),
            approver=acting_as,
            remember=remember,
            identity=_identity_of(key, acting_as),
        ),
    )
    metrics.count_decision(body.decision, outcome(result))
    if result.accepted and result.winner is None:
        # One approval of a quorum: counted, the call waits for the others.
        response.status_code = 202
        return ConfirmationOut(accepted=True, message=result.message,
                               votes=result.votes, quorum=result.quorum)
    if result.accepted and result.winner is not None:
        metrics.observe_approval_latency(
            body.decision, "api", (result.winner.decided_at - approval.requested_at).total_seconds()
        )
        return ConfirmationOut(
            accepted=True, decision=DecisionOut.of(result.winner), message=result.message
        )
    refused = answer_refused(result)
    if refused.status != 409:
        raise ApiError(refused.status, refused.code, refused.message)
    details: dict[str, Any] = {}
    if result.winner is not None:
        details["winner"] = DecisionOut.of(result.winner).model_dump(mode="json")
    else:
        stored = await repo.get_approval(request_id)
        if stored is not None and stored.decision is not None:
            details["winner"] = {
                "request_id": stored.request_id,
                "decision": stored.decision,
                "decided_by": stored.decided_by,
                "principal_id": stored.principal_id,
                "claimed_name": stored.claimed_name,
                "via": stored.via,
                "reason": stored.reason,
                "decided_at": stored.decided_at.isoformat() if stored.decided_at else None,
            }
    raise ApiError(refused.status, refused.code, refused.message, details)


def _identity_of(key: Principal, acting_as: str | None) -> dict[str, Any]:
    """How the API knew the decider: its API key, or the provider's bearer token."""
    if key.oidc is not None:
        return identity.oidc(key.oidc["issuer"], key.oidc["subject"], key.oidc.get("email"),
                             approver=acting_as)
    return identity.key(key.key_id, key.name)
