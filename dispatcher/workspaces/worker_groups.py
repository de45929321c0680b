"""Worker groups: which workers may classify and run a session's calls.

A session's workspace lives on one machine (an agent's VM or container). A
worker group names the workers that have it; each worker polls one task queue
per group it serves, `<main queue>.<group>`, and the call workflow schedules
every workspace-touching activity (classify, revalidate, execute) there. The
workflow itself, the store writes and the API run anywhere.

Pure functions only: the workflow derives the queue with `group_queue`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath

#: Group names become part of a task queue name and of history.
GROUP_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: Activities that need the session's workspace (realpath, symlinks, files).
WORKSPACE_ACTIVITIES = frozenset(
    {"parkgate.classify", "parkgate.revalidate", "parkgate.execute", "parkgate.execute_local"}
)


def check_group_name(name: str) -> str:
    """`name` when it is a valid group name; ValueError otherwise."""
    if not GROUP_NAME.match(name):
        raise ValueError(
            f"worker group name {name!r} must be 1-64 letters, digits, '-' or '_'"
        )
    return name


def group_queue(main_queue: str, group: str) -> str:
    """The task queue the workers of `group` poll, beside the main queue."""
    return f"{main_queue}.{group}"


def _lexical(path: str | PurePath) -> str:
    return posixpath.normpath(str(path))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def group_for_workspace(
    workspace: str | PurePath, groups: Mapping[str, Sequence[str | PurePath]]
) -> str | None:
    """The group whose root holds `workspace` (the deepest root wins); None if none.

    Lexical only: the API that asks may not have the workspace at all.
    """
    path = _lexical(workspace)
    best: tuple[int, str] | None = None
    for name, roots in groups.items():
        for root in roots:
            text = _lexical(root)
            if _under(path, text) and (best is None or len(text) > best[0]):
                best = (len(text), name)
    return best[1] if best else None


def in_group_roots(workspace: str | PurePath, roots: Sequence[str | PurePath]) -> bool:
    """Whether `workspace` is (lexically) under one of `roots`."""
    path = _lexical(workspace)
    return any(_under(path, _lexical(root)) for root in roots)


def served_queues(main_queue: str, groups: Sequence[str], *, main: bool = True) -> list[str]:
    """Every task queue a worker with these settings polls, main queue first."""
    return ([main_queue] if main else []) + [group_queue(main_queue, g) for g in groups]
