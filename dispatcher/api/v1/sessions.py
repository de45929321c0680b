"""/v1 sessions: register a session and its workspace, read one."""

from __future__ import annotations

import asyncio
import posixpath
from pathlib import Path, PurePosixPath
from typing import Any

from fastapi import APIRouter, Response

from parkgate.api.deps import (
    AgentDep,
    DepsDep,
    ReaderDep,
    RepoDep,
    SettingsDep,
)
from parkgate.api.errors import ApiError, error_responses
from parkgate.api.schemas import (
    SessionIn,
    SessionOut,
)
from parkgate.api.v1.common import (
    SessionId,
    reject_unencodable,
    session_of,
)
from parkgate.approvals.access import Principal
from parkgate.settings import Settings
from parkgate.store.errors import SessionConflictError
from parkgate.store.repository import Repository
from parkgate.workspaces.worker_groups import group_for_workspace, in_group_roots

router = APIRouter(prefix="/v1", tags=["agent"])


def _in_roots(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _check_workspace(raw_path: str, roots: list[Path]) -> Path:
    """The resolved workspace, or a 422 saying why it is not acceptable."""
    if "\x00" in raw_path:
        raise ApiError(422, "invalid_workspace", "workspace_path contains a NUL byte")
    raw = Path(raw_path)  # the server's "~" means nothing to a remote agent
    if not raw.is_absolute():
        raise ApiError(422, "invalid_workspace", "workspace_path must be an absolute path")
    try:
        resolved = raw.resolve()
    except (OSError, RuntimeError) as exc:
        raise ApiError(
            422, "invalid_workspace", f"workspace_path cannot be resolved: {exc}"
        ) from exc
    if not _in_roots(resolved, roots):
        raise ApiError(
            422,
            "workspace_not_allowed",
            "workspace_path is not under any configured workspace root",
            {"workspace_roots": [str(r) for r in roots]},
        )
    if not resolved.is_dir():
        raise ApiError(422, "invalid_workspace", "workspace_path is not an existing directory")
    return resolved


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


def _check_remote_workspace(
    raw_path: str, group: str, settings: Settings, project: str
) -> PurePosixPath:
    """A grouped session's workspace, checked without touching this host's disk:
    absolute, normalized, under the group's roots or the workspace roots (the
    project's own roots only, when it has some)."""
    if "\x00" in raw_path:
        raise ApiError(422, "invalid_workspace", "workspace_path contains a NUL byte")
    if not raw_path.startswith("/"):
        raise ApiError(422, "invalid_workspace", "workspace_path must be an absolute path")
    path = PurePosixPath(posixpath.normpath(raw_path))
    own = settings.project_workspace_roots.get(project)
    roots = own if own is not None else [
        *settings.worker_groups.get(group, []), *settings.workspace_roots]
    if not in_group_roots(path, roots):
        raise ApiError(
            422,
            "workspace_not_allowed",
            f"workspace_path is not under a root of worker group {group!r} "
            "or a configured workspace root",
            {"workspace_roots": [str(r) for r in roots]},
        )
    return path


async def _claim_ground(repo: Repository, session_id: str, path: str, key: Principal) -> None:
    """403 unless the key's project may hold `path` (parkgate.workspaces.ground: the project
    that registered it first, or one an admin granted it to). A session already
    registered is left to `register_session` (200 when the same, else 409)."""
    if await repo.get_session(session_id) is not None:
        return
    verdict = await repo.claim_workspace(path, key.project, by=key.key_id)
    if not verdict.allowed:
        raise ApiError(403, "workspace_taken", f"workspace_path {path!r} is refused: "
                       f"{verdict.reason}", {"workspace_path": path})


def _check_client_tools(body: SessionIn, deps: Any) -> None:
    """Client tools: distinct names, none a hosted tool's (a call names one tool)."""
    names = [t.name for t in body.client_tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ApiError(422, "invalid_client_tools", f"client tools named twice: {twice}")
    hosted = sorted(n for n in names if n in deps.registry)
    if hosted:
        raise ApiError(422, "invalid_client_tools",
                       f"client tools with a hosted tool's name: {hosted}")


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
    _check_client_tools(body, deps)
    group = _worker_group(body, settings)
    resolved: Path | PurePosixPath
    if group is None:
        resolved = await asyncio.to_thread(
            _check_workspace, body.workspace_path, settings.workspace_roots_for(key.project))
    else:
        # The workspace lives on the group's hosts, not necessarily here: a
        # lexical check only; the group's worker resolves it when it classifies.
        resolved = _check_remote_workspace(body.workspace_path, group, settings, key.project)
    await _claim_ground(repo, body.session_id, str(resolved), key)
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
