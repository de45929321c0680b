"""Store side of projects' ground (parkgate.workspaces.ground): claim, grant, revoke, list.

A claim reads the holdings that overlap the path and applies `ground.judge`
in the same write transaction, serialized with every other claim and grant
(BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL), so two projects
racing for one path, or for a path and its parent, cannot both win.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy import ColumnElement, Table, delete, func, or_, select
from sqlalchemy.engine import Connection

from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import StoreBase
from parkgate.store.canonical import clean_text
from parkgate.store.models import Base
from parkgate.workspaces.ground import (
    Holding,
    HoldingKind,
    Verdict,
    descendants_prefix,
    judge,
    lineage,
)

HOLDINGS: Table = Base.metadata.tables["workspace_holdings"]
#: PostgreSQL: the transaction-scoped lock serializing claims and grants.
_GROUND_LOCK = select(func.pg_advisory_xact_lock(0x7067_6772_6F75_6E64))  # "pgground"


def path_hash(path: str) -> str:
    return hashlib.sha256(clean_text(path).encode("utf-8")).hexdigest()


class WorkspaceHoldingRecord(Holding):
    """A stored holding, with who made it and when."""

    created_by: str | None = None
    created_at: datetime


class WorkspaceStore(StoreBase):
    """Which project holds which workspace path."""

    async def claim_workspace(self, path: str, project: str, *, by: str | None) -> Verdict:
        """Judge `project` registering a session on `path`; record the claim when
        the path becomes the project's own. Refusals record nothing."""

        def work(conn: Connection) -> Verdict:
            self._lock_ground(conn)
            verdict = judge(path, project, self._overlapping(conn, path))
            if verdict.claim:
                self._hold(conn, path, project, "owner", by)
            return verdict

        return await self._in_write(work)

    async def grant_workspace(self, path: str, project: str, *, by: str) -> bool:
        """Grant `path` (and everything inside it) to `project`; False when it
        already held that grant."""

        def work(conn: Connection) -> bool:
            self._lock_ground(conn)
            return self._hold(conn, path, project, "grant", by)

        return await self._in_write(work)

    async def release_workspace(
        self, path: str, project: str, *, kinds: tuple[HoldingKind, ...] = ("grant",)
    ) -> bool:
        """Remove `project`'s holding of exactly `path` (by default only a grant);
        False when there was none. Sessions registered there keep their
        workspace (docs/HTTP.md, "Workspaces belong to projects")."""

        def work(conn: Connection) -> bool:
            self._lock_ground(conn)
            result = conn.execute(delete(HOLDINGS).where(
                HOLDINGS.c.path_hash == path_hash(path), HOLDINGS.c.project == project,
                HOLDINGS.c.kind.in_(kinds),
            ))
            return bool(result.rowcount)

        return await self._in_write(work)

    async def workspace_holdings(
        self, *, project: str | None = None, path: str | None = None
    ) -> list[WorkspaceHoldingRecord]:
        """Holdings, by path: all, one project's, or those overlapping `path`."""
        query = select(HOLDINGS).order_by(HOLDINGS.c.path, HOLDINGS.c.project)
        if project is not None:
            query = query.where(HOLDINGS.c.project == project)
        if path is not None:
            query = query.where(_overlapping(path))
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [WorkspaceHoldingRecord.model_validate(dict(r)) for r in rows]

    # ------------------------------------------------------------------ helpers
    def _lock_ground(self, conn: Connection) -> None:
        if self.dialect == "postgresql":
            conn.execute(_GROUND_LOCK)  # SQLite: BEGIN IMMEDIATE already serializes

    @staticmethod
    def _overlapping(conn: Connection, path: str) -> list[Holding]:
        rows = conn.execute(
            select(HOLDINGS.c.path, HOLDINGS.c.project, HOLDINGS.c.kind)
            .where(_overlapping(path))
        ).mappings()
        return [Holding.model_validate(dict(r)) for r in rows]

    def _hold(
        self, conn: Connection, path: str, project: str, kind: HoldingKind, by: str | None
    ) -> bool:
        result = conn.execute(
            statements.insert(self.dialect, HOLDINGS)
            .values(path_hash=path_hash(path), project=project, path=path, kind=kind,
                    created_by=by, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["path_hash", "project"])
        )
        # An existing holding of the path (an owner row, or the same grant) stays.
        return bool(result.rowcount)


def _overlapping(path: str) -> ColumnElement[bool]:
    """Holdings at `path`, above it, or inside it."""
    return or_(
        HOLDINGS.c.path_hash.in_([path_hash(p) for p in lineage(path)]),
        HOLDINGS.c.path.startswith(descendants_prefix(path), autoescape=True),
    )
