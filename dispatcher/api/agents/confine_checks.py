"""The Claude Code hook's confinement on this host (parkgate.client_tools.confinement):
which paths are parkgate's own here, and which belong to other projects.

Protected: every parkgate data directory of this host, the paths tools are
hidden from (secret files, the SQLite database, `tool_hidden_paths`; a
directory that holds the session's workspace is left to the outside-workspace
rule, its secret files stay protected), this process's logs, and the
workspaces of other projects (parkgate.workspaces.ground: the ground a
session of the key's project may not register on).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from parkgate.client_tools.confinement import (
    PATH_FIELDS,
    SHELL_TOOLS,
    Protected,
    Reach,
    command_paths,
    inside,
    judge,
    tool_paths,
)
from parkgate.sandbox.paths import log_paths
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.workspaces import ground

DATA_DIR = "parkgate's data directory"
HIDDEN = "a path parkgate hides from tools (its secrets, database or tool_hidden_paths)"
LOG = "a log of parkgate"
OTHER_PROJECT = "another project's workspace"


def host_protected(settings: Settings, workspace: str) -> list[Protected]:
    """parkgate's own paths on this host (resolved)."""
    ws = os.path.realpath(workspace)
    data = {os.path.realpath(d) for d in settings.data_dirs()}
    found = [Protected(d, DATA_DIR) for d in sorted(data)]
    for path in settings.hidden_tool_paths():
        real = os.path.realpath(path)
        if real in data or real == "/" or (real != ws and inside(ws, real)):
            continue  # a directory holding the workspace: outside it, a person decides
        found.append(Protected(real, HIDDEN))
    found += [Protected(os.path.realpath(p), LOG) for p in log_paths()]
    return found


async def other_projects(repo: Repository, project: str) -> list[Protected]:
    """Workspaces of other projects that `project` may not touch."""
    holdings = await repo.workspace_holdings()
    plain = [ground.Holding(path=h.path, project=h.project, kind=h.kind) for h in holdings]
    return [Protected(h.path, OTHER_PROJECT) for h in plain
            if h.project != project and not ground.judge(h.path, project, plain).allowed]


@dataclass
class _Seen:
    """A call's paths as resolved on disk, and this host's protected paths."""

    paths: list[str]
    patterns: list[str]
    holding: bool
    protected: list[Protected]
    workspace: str
    here: Reach


def _look(settings: Settings, tool_name: str, tool_input: dict[str, Any], cwd: str,
          workspace: str) -> _Seen:
    home = os.path.expanduser("~")
    paths: list[str] = []
    patterns: list[str] = []
    holding = tool_name not in SHELL_TOOLS
    if tool_name in SHELL_TOOLS:
        command = tool_input.get("command")
        if isinstance(command, str):
            paths, patterns = command_paths(command, cwd, home)
    elif tool_name in PATH_FIELDS:
        paths, patterns = tool_paths(tool_name, tool_input, cwd, home)
    protected = host_protected(settings, workspace)
    # The working directory itself must not be parkgate's.
    here = judge([os.path.realpath(cwd)], workspace=cwd, protected=protected)
    return _Seen(paths, patterns, holding, protected, os.path.realpath(workspace), here)


async def reach(settings: Settings, repo: Repository, project: str, tool_name: str,
                tool_input: dict[str, Any], cwd: str, workspace: str) -> Reach:
    """What a Claude Code call reaches: a protected path (denied) or a path
    outside the session's workspace. Other projects' ground is looked up only
    when a path leaves the workspace."""
    seen = await asyncio.to_thread(_look, settings, tool_name, tool_input, cwd, workspace)
    if seen.here.denied:
        return seen.here
    protected = seen.protected
    if seen.patterns or any(not inside(p, seen.workspace) for p in seen.paths):
        protected = [*protected, *await other_projects(repo, project)]
    found = judge(seen.paths, workspace=seen.workspace, protected=protected,
                  patterns=seen.patterns, holding=seen.holding)
    return found if tool_name not in SHELL_TOOLS else Reach(denied=found.denied)
