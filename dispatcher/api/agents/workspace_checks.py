"""A session's workspace as the API accepts it: on this host's disk under the
key's roots, or (a worker group's) lexically under the group's roots, and on
ground the key's project may hold. POST /v1/sessions and the Claude Code hook
apply the same checks, so they live below both."""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePosixPath

from parkgate.api.shared.errors import ApiError
from parkgate.approvals.access import Principal
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.workspaces.worker_groups import in_group_roots


def _in_roots(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def not_under_roots(path: str, roots: list[Path], setting: str) -> str:
    """Why `path` is refused and what to change: the roots and the setting that
    holds them (and, for the shared roots, the command that adds one at once)."""
    listed = ", ".join(str(root) for root in roots) or "none"
    env = "PARKGATE_" + setting.split(".", 1)[0].upper()
    how = (f"add one with `parkgate workspaces roots add {path}` (no restart needed) "
           f"or in the {setting} setting ({env})" if setting == "workspace_roots"
           else f"add one to the {setting} setting ({env})")
    return f"workspace_path {path} is not under a workspace root ({listed}): {how}"


def check_workspace(
    raw_path: str, roots: list[Path], *, setting: str = "workspace_roots"
) -> Path:
    """The resolved workspace, or a 422 saying why it is not acceptable (for a path
    outside `roots`: the path, the roots and `setting`, where they come from)."""
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
            not_under_roots(str(resolved), roots, setting),
            {"workspace_path": str(resolved), "workspace_roots": [str(r) for r in roots],
             "setting": setting},
        )
    if not resolved.is_dir():
        raise ApiError(422, "invalid_workspace", "workspace_path is not an existing directory")
    return resolved


def check_remote_workspace(
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
        *settings.worker_groups.get(group, []), *settings.workspace_roots_for(project)]
    if not in_group_roots(path, roots):
        raise ApiError(
            422,
            "workspace_not_allowed",
            not_under_roots(str(path), roots, f"project_workspace_roots.{project}")
            if own is not None else
            f"workspace_path {path} is not under a root of worker group {group!r} or a "
            f"workspace root ({', '.join(str(r) for r in roots) or 'none'}): add one to "
            f"the worker_groups.{group} or the workspace_roots setting "
            "(PARKGATE_WORKER_GROUPS, PARKGATE_WORKSPACE_ROOTS)",
            {"workspace_path": str(path), "workspace_roots": [str(r) for r in roots]},
        )
    return path


async def claim_ground(repo: Repository, session_id: str, path: str, key: Principal) -> None:
    """403 unless the key's project may hold `path` (parkgate.workspaces.ground: the project
    that registered it first, or one an admin granted it to). A session already
    registered is left to `register_session` (200 when the same, else 409)."""
    if await repo.get_session(session_id) is not None:
        return
    verdict = await repo.claim_workspace(path, key.project, by=key.key_id)
    if not verdict.allowed:
        raise ApiError(403, "workspace_taken", f"workspace_path {path!r} is refused: "
                       f"{verdict.reason}", {"workspace_path": path})
