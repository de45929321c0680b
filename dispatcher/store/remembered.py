"""Store side of remembered decisions: save (idempotent), look up, list, revoke.

A mixin of Repository over the shared engine and transactions (store/base.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, or_, select, true, update
from sqlalchemy.engine import Connection

from parkgate.rules.remembered import RememberedRule
from parkgate.store import statements
from parkgate.store.base import StoreBase
from parkgate.store.models import Base

RULES: Table = Base.metadata.tables["remembered_rules"]


class RememberedRulesStore(StoreBase):
    """Rules are written once per approval request (a retry writes nothing new)."""

    async def save_remembered(self, rule: RememberedRule) -> None:
        values = rule.model_dump()

        def work(conn: Connection) -> None:
            conn.execute(
                statements.insert(self.dialect, RULES)
                .values(**values)
                .on_conflict_do_nothing()
            )

        await self._in_write(work)

    async def active_remembered(
        self, *, project: str, tool_name: str, session_id: str, workspace_path: str,
        now: datetime, hashes: list[str] | None = None,
    ) -> list[RememberedRule]:
        """Unexpired, unrevoked rules of this tool that cover the session or workspace
        (and, given `hashes`, whose stored input hash is one of them)."""
        query = select(RULES).where(
            RULES.c.input_hash.in_(hashes) if hashes is not None else true(),
            RULES.c.project == project,
            RULES.c.tool_name == tool_name,
            RULES.c.expires_at > now,
            RULES.c.revoked_at.is_(None),
            or_(
                (RULES.c.scope == "session") & (RULES.c.session_id == session_id),
                (RULES.c.scope == "workspace") & (RULES.c.workspace_path == workspace_path),
            ),
        )
        return await self._rules(query)

    async def list_remembered(
        self, *, project: str, session_id: str | None = None,
        workspace_path: str | None = None, include_inactive: bool = False,
        now: datetime | None = None,
    ) -> list[RememberedRule]:
        query = select(RULES).where(RULES.c.project == project)
        if session_id is not None:
            query = query.where(RULES.c.session_id == session_id)
        if workspace_path is not None:
            query = query.where(RULES.c.workspace_path == workspace_path)
        if not include_inactive:
            query = query.where(RULES.c.revoked_at.is_(None))
            if now is not None:
                query = query.where(RULES.c.expires_at > now)
        return await self._rules(query.order_by(RULES.c.created_at, RULES.c.rule_id))

    async def list_remembered_by_approver(
        self, approver: str, *, now: datetime
    ) -> list[RememberedRule]:
        """Active rules a named approver made (any project: their personal inbox)."""
        query = select(RULES).where(RULES.c.approver == approver,
                                    RULES.c.revoked_at.is_(None), RULES.c.expires_at > now)
        return await self._rules(query.order_by(RULES.c.created_at, RULES.c.rule_id))

    async def revocable_remembered(
        self, *, project: str | None, approver: str | None, now: datetime
    ) -> list[RememberedRule]:
        """Active rules an inbox viewer may revoke: its project's (an approver key
        or a signed-in person: `project`), else those a named approver made."""
        if project is not None:
            return await self.list_remembered(project=project, now=now)
        return await self.list_remembered_by_approver(str(approver), now=now)

    async def get_remembered(self, rule_id: str) -> RememberedRule | None:
        rules = await self._rules(select(RULES).where(RULES.c.rule_id == rule_id))
        return rules[0] if rules else None

    async def revoke_remembered(
        self, rule_id: str, *, by: str, now: datetime
    ) -> RememberedRule | None:
        """Revoke once (a second revoke keeps the first time and revoker)."""

        def work(conn: Connection) -> None:
            conn.execute(
                update(RULES)
                .where(RULES.c.rule_id == rule_id, RULES.c.revoked_at.is_(None))
                .values(revoked_at=now, revoked_by=by)
            )

        await self._in_write(work)
        return await self.get_remembered(rule_id)

    async def _rules(self, query: Any) -> list[RememberedRule]:
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [RememberedRule.model_validate(dict(r)) for r in rows]


