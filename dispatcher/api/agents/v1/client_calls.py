"""/v1 client-executed calls: claim a released call, start the claim, report its outcome.

Only an agent key of the session's project may claim and report (an
approver key gets 403). See parkgate.api.agents.client_calls for the semantics.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from parkgate.api.agents import client_calls
from parkgate.api.agents.v1.common import SessionId, ToolUseId, call_service, session_of
from parkgate.api.shared.deps import AgentDep, RepoDep, SettingsDep
from parkgate.api.shared.errors import error_responses
from parkgate.api.shared.schemas import ClaimIn, OutcomeIn, StartIn
from parkgate.durable.client_payloads import ClaimResult, OutcomeInput, OutcomeResult, StartInput

router = APIRouter(prefix="/v1", tags=["agent"])


@router.post(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/claim",
    response_model=ClaimResult,
    responses=error_responses(401, 403, 429, 404, 409, 422),
    summary="Claim a released client-executed call: the first claim wins a lease",
)
async def claim_call(
    session_id: SessionId, tool_use_id: ToolUseId, request: Request, repo: RepoDep,
    key: AgentDep, settings: SettingsDep, body: ClaimIn | None = None,
) -> ClaimResult:
    await session_of(repo, session_id, key)
    lease = client_calls.lease_for(body.lease_seconds if body else None,
                                   settings.client_lease_seconds,
                                   settings.client_lease_max_seconds)
    inp = client_calls.claim_input(settings, key.key_id, key.name, lease)
    return await client_calls.claim(call_service(request), session_id, tool_use_id, inp)


@router.post(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/start",
    response_model=ClaimResult,
    responses=error_responses(401, 403, 429, 404, 409, 422),
    summary="Start a claim (its claim_id) just before running the call: its lease begins",
)
async def start_claim(
    session_id: SessionId, tool_use_id: ToolUseId, body: StartIn, request: Request,
    repo: RepoDep, key: AgentDep,
) -> ClaimResult:
    await session_of(repo, session_id, key)
    inp = StartInput(claim_id=body.claim_id, started_by=f"key:{key.key_id}")
    return await client_calls.start(call_service(request), session_id, tool_use_id, inp)


@router.post(
    "/sessions/{session_id}/tool-calls/{tool_use_id}/outcome",
    response_model=OutcomeResult,
    responses=error_responses(401, 403, 429, 404, 409, 413, 422),
    summary="Report what the client's run of a claimed call returned",
)
async def report_outcome(
    session_id: SessionId, tool_use_id: ToolUseId, body: OutcomeIn, request: Request,
    repo: RepoDep, key: AgentDep,
) -> OutcomeResult:
    await session_of(repo, session_id, key)
    inp = OutcomeInput(content=body.blocks(), is_error=body.is_error,
                       input_sha256=body.input_sha256, reported_by=f"key:{key.key_id}",
                       reported_by_name=key.name)
    return await client_calls.report(call_service(request), session_id, tool_use_id, inp)
