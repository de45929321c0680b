"""/v1 workspaces: the paths a project holds, and admins sharing them.

A workspace path belongs to the project that registered a session on it first
(parkgate.workspaces.ground). An admin of that project may grant it, or a directory inside
it, to another project, and take the grant back; the CLI (`parkgate workspaces
grant|revoke`) may grant any path to any project. Other projects' holdings are
never listed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from parkgate.api.agents.v1.common import reject_unencodable
from parkgate.api.shared.deps import AdminDep, RepoDep
from parkgate.api.shared.errors import ApiError, error_responses, not_found
from parkgate.approvals.access import PROJECT_PATTERN, Principal
from parkgate.store.repository import Repository
from parkgate.store.workspace_store import WorkspaceHoldingRecord
from parkgate.workspaces.ground import holding_path, within

router = APIRouter(prefix="/v1", tags=["workspaces"])

_Path = Field(min_length=1, max_length=4096, description="An absolute path, as sessions "
              "store it (resolved).")
_Project = Field(pattern=PROJECT_PATTERN, description="The project the path is granted to.")


class WorkspaceOut(BaseModel):
    path: str
    project: str
    #: "owner" (registered first) or "grant".
    kind: str
    created_by: str | None = None
    created_at: datetime


class WorkspaceListOut(BaseModel):
    """The key's project's holdings, and the grants of its ground to other projects."""

    items: list[WorkspaceOut]


class GrantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = _Path
    project: str = _Project


def _out(holding: WorkspaceHoldingRecord) -> WorkspaceOut:
    return WorkspaceOut(**holding.model_dump())


def _normalized(raw: str, loc: list[str]) -> str:
    reject_unencodable(raw, loc)
    try:
        return holding_path(raw)
    except ValueError as exc:
        raise ApiError(422, "invalid_workspace", f"path {exc}") from None


async def _owned_root(repo: Repository, key: Principal, path: str) -> str:
    """The workspace of the key's project that holds `path` (403 when none does)."""
    for held in await repo.workspace_holdings(project=key.project, path=path):
        if held.kind == "owner" and within(path, held.path):
            return held.path
    raise ApiError(403, "forbidden",
                   f"only the project that owns a workspace may share it; {path!r} is not "
                   f"inside a workspace of project {key.project!r}", {"path": path})


@router.get(
    "/workspaces",
    response_model=WorkspaceListOut,
    responses=error_responses(401, 403, 422, 429),
    summary="This project's workspaces, and the grants of them to other projects (admin)",
)
async def list_workspaces(repo: RepoDep, key: AdminDep) -> WorkspaceListOut:
    holdings = await repo.workspace_holdings()
    owned = [h.path for h in holdings if h.project == key.project and h.kind == "owner"]
    shown = [h for h in holdings if h.project == key.project or (
        h.kind == "grant" and any(within(h.path, root) for root in owned))]
    return WorkspaceListOut(items=[_out(h) for h in shown])


@router.post(
    "/workspaces/grants",
    response_model=WorkspaceOut,
    status_code=201,
    responses={200: {"model": WorkspaceOut, "description": "Already granted"},
               **error_responses(401, 403, 422, 429)},
    summary="Grant a workspace of this project (or a directory in it) to another project (admin)",
)
async def grant_workspace(
    body: GrantIn, repo: RepoDep, key: AdminDep, response: Response
) -> WorkspaceOut:
    path = _normalized(body.path, ["body", "path"])
    await _owned_root(repo, key, path)
    if body.project == key.project:
        raise ApiError(422, "invalid_request", "a project needs no grant of its own workspace")
    created = await repo.grant_workspace(path, body.project, by=f"admin:{key.name}")
    if not created:
        response.status_code = 200
    [held] = [h for h in await repo.workspace_holdings(project=body.project, path=path)
              if h.path == path]
    return _out(held)


@router.delete(
    "/workspaces/grants",
    response_model=WorkspaceOut,
    responses=error_responses(401, 403, 404, 422, 429),
    summary="Take back a grant of this project's workspace (admin)",
)
async def revoke_workspace_grant(
    repo: RepoDep,
    key: AdminDep,
    path: Annotated[str, Query(min_length=1, max_length=4096)],
    project: Annotated[str, Query(pattern=PROJECT_PATTERN)],
) -> WorkspaceOut:
    path = _normalized(path, ["query", "path"])
    await _owned_root(repo, key, path)
    held = [h for h in await repo.workspace_holdings(project=project, path=path)
            if h.path == path and h.kind == "grant"]
    if not held or not await repo.release_workspace(path, project):
        raise not_found(f"grant of {path!r} to project {project!r}")
    return _out(held[0])

