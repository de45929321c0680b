"""/v1 sessions: register a session and its workspace, read one."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import APIRouter, Response

from parkgate.api.agents.tool_classes import check_declared
from parkgate.api.agents.v1.common import (
    SessionId,
    reject_unencodable,
    session_of,
)
from parkgate.api.agents.workspace_checks import (
    check_remote_workspace,
    check_workspace,
    claim_ground,
)
from parkgate.api.shared.deps import (
    AgentDep,
    DepsDep,
    ReaderDep,
    RepoDep,
    SettingsDep,
)
from parkgate.api.shared.errors import ApiError, error_responses
from parkgate.api.shared.schemas import (
    SessionIn,
    SessionOut,
)
from parkgate.settings import Settings
from parkgate.store.errors import SessionConflictError
from parkgate.workspaces.worker_groups import group_for_workspace

router = APIRouter(prefix="/v1", tags=["agent"])


def _worker_group(body: SessionIn, settings: Settings) -> str | None:
    """The session's worker group: the one named (it must be configured), else the
    group whose root holds the workspace, else None (any worker)."""
    groups = settings.worker_groups
    if body.worker_group is not None:
        if body.worker_group not in groups:
            raise ApiError(
                422,
                "unknown_worker_group",
                f"worker group {body.worker_group!r} is not configured",
                {"worker_groups": sorted(groups)},
            )
        return body.worker_group
    return group_for_workspace(body.workspace_path, groups)


def _check_client_tools(body: SessionIn, deps: Any, settings: Settings) -> None:
    """Client tools: distinct names, none a hosted tool's (a call names one tool),
    none looser than the deployment's class of its name."""
    names = [t.name for t in body.client_tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ApiError(422, "invalid_client_tools", f"client tools named twice: {twice}")
    hosted = sorted(n for n in names if n in deps.registry)
    if hosted:
        raise ApiError(422, "invalid_client_tools",
                       f"client tools with a hosted tool's name: {hosted}")
    check_declared(body.client_tools, settings, deps.registry)


@router.post(
    "/sessions",
    response_model=SessionOut,
    status_code=201,
    responses={200: {"model": SessionOut, "description": "Already registered (same workspace)"},
               **error_responses(401, 403, 429, 409, 413, 422)},
    summary="Register a session and its workspace",
)
async def register_session(
    body: SessionIn, repo: RepoDep, settings: SettingsDep, key: AgentDep, response: Response,
    deps: DepsDep,
) -> SessionOut:
    reject_unencodable(body.workspace_path, ["body", "workspace_path"])
    _check_client_tools(body, deps, settings)
    group = _worker_group(body, settings)
    resolved: Path | PurePosixPath
    if group is None:
        resolved = await asyncio.to_thread(
            check_workspace, body.workspace_path, settings.workspace_roots_for(key.project),
            setting=settings.workspace_roots_setting(key.project))
    else:
        # The workspace lives on the group's hosts, not necessarily here: a
        # lexical check only; the group's worker resolves it when it classifies.
        resolved = check_remote_workspace(body.workspace_path, group, settings, key.project)
    await claim_ground(repo, body.session_id, str(resolved), key)
    try:
        record, created = await repo.register_session(
            body.session_id, str(resolved), body.kind,
            project=key.project, registered_by=key.key_id,
            worker_group=group, group_explicit=body.worker_group is not None,
            client_tools=[t.model_dump(mode="json") for t in body.client_tools],
        )
    except SessionConflictError as exc:
        details: dict[str, Any] = {"session_id": exc.session_id}
        if exc.existing_workspace is not None:  # never another project's workspace
            details["workspace_path"] = exc.existing_workspace
        if exc.existing_group is not None:
            details["worker_group"] = exc.existing_group
        raise ApiError(409, "session_conflict", str(exc), details) from exc
    if not created:
        response.status_code = 200
    return SessionOut(**record.model_dump())


@router.get(
    "/sessions/{session_id}",
    response_model=SessionOut,
    responses=error_responses(401, 403, 429, 404, 422),
    summary="A registered session",
)
async def get_session(session_id: SessionId, repo: RepoDep, key: ReaderDep) -> SessionOut:
    return SessionOut(**(await session_of(repo, session_id, key)).model_dump())
