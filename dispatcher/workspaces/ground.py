"""Projects own their ground: which project may register a session on a workspace path.

A workspace path belongs to the project that registered it first (an `owner`
holding), and to the projects an admin granted it to (`grant` holdings). Paths
overlap when one is the other or lies inside it, so a project may not register
a path inside, or containing, another project's workspace: that would read (or
write) the other project's files with the other project's approvals nowhere in
sight. The rules, in order:

1. a path inside a grant the project holds is allowed (an admin said so);
2. a path that overlaps another project's owned workspace is refused;
3. a path that overlaps another project's grant is refused, unless the grant
   lies inside ground this project owns (it is the grantor's own ground);
4. otherwise it is allowed, and becomes the project's own unless it already
   lies inside ground the project owns.

Pure: the store keeps the holdings and applies `judge` in the transaction that
records a claim (store/workspace_store.py), so two projects racing for one path
cannot both win.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel

HoldingKind = Literal["owner", "grant"]

#: What a refused registration is told (never which project holds the path).
RULE = (
    "a workspace belongs to the project that registered it first, or to projects an "
    "admin grants it to (`parkgate workspaces grant`); workspace_path is, lies inside, "
    "or contains a workspace of another project"
)


class Holding(BaseModel):
    """One project's hold on a workspace path."""

    path: str
    project: str
    kind: HoldingKind


@dataclass(frozen=True)
class Verdict:
    """What `judge` decided: allowed or not (and why), and whether the path
    becomes the project's own (an owner holding to record)."""

    allowed: bool
    claim: bool = False
    reason: str | None = None


def holding_path(raw: str) -> str:
    """A path as holdings name it: absolute, normalized (ValueError otherwise).
    The API's grant routes and `parkgate workspaces` read paths the same way."""
    if "\x00" in raw or not raw.startswith("/"):
        raise ValueError("must be an absolute path")
    return posixpath.normpath(raw)


def within(path: str, root: str) -> bool:
    """`path` is `root` or lies inside it (both absolute, normalized)."""
    return PurePosixPath(path).is_relative_to(PurePosixPath(root))


def overlaps(a: str, b: str) -> bool:
    return within(a, b) or within(b, a)


def lineage(path: str) -> list[str]:
    """`path` and every directory above it: the holdings that may contain it."""
    pure = PurePosixPath(path)
    return [str(pure), *(str(p) for p in pure.parents)]


def descendants_prefix(path: str) -> str:
    """The text every path strictly inside `path` starts with."""
    return path.rstrip("/") + "/"


def judge(path: str, project: str, holdings: Iterable[Holding]) -> Verdict:
    """May `project` register a session on `path`, given the holdings that overlap it?"""
    relevant = [h for h in holdings if overlaps(path, h.path)]
    mine = [h for h in relevant if h.project == project]
    if any(h.kind == "grant" and within(path, h.path) for h in mine):
        return Verdict(allowed=True)
    owned = [h.path for h in mine if h.kind == "owner"]
    for other in (h for h in relevant if h.project != project):
        if other.kind == "owner" or not any(within(other.path, root) for root in owned):
            return Verdict(allowed=False, reason=RULE)
    return Verdict(allowed=True, claim=not any(within(path, root) for root in owned))
