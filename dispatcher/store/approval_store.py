"""Approval requests: saving them (idempotent), deciding them (first write
wins), and the reads behind approval pages and the approver inbox."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, RowMapping

from parkgate.approvals.access import Submitter
from parkgate.calls.records import ApprovalRecord, CallStatus
from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import StoreBase, fit
from parkgate.store.canonical import clean_text, normalize_json, redact
from parkgate.store.errors import ApprovalNotFoundError
from parkgate.store.statements import APPROVALS, CALLS, SESSIONS, SUBMISSIONS
from parkgate.store.types import as_utc


class WaitingApproval(NamedTuple):
    """One row of `Repository.waiting_approvals`."""

    approval: ApprovalRecord
    project: str
    #: None for a composed tool's sub-call (it has no row of its own).
    status: CallStatus | None
    #: The key that submitted the call (None for a sub-call: ask for its parent's).
    submitter: Submitter | None


class ApprovalStore(StoreBase):
    """Approval rows; a stored decision is never overwritten or cleared."""

    async def save_approval(self, approval: ApprovalRecord) -> None:
        """Insert or refresh an approval request (idempotent on request_id).

        A decision in `approval` is applied first-write-wins; a stored decision
        is never overwritten or cleared.
        """
        values = {
            "request_id": approval.request_id,
            "session_id": approval.session_id,
            "turn_id": approval.turn_id,
            "tool_use_id": approval.tool_use_id,
            "tool_name": approval.tool_name,
            "token_hash": approval.token_hash,
            "input_hash": approval.input_hash,
            "requested_at": as_utc(approval.requested_at),
            "expires_at": as_utc(approval.expires_at) if approval.expires_at else None,
            "info": normalize_json(redact(approval.info)),
        }
        await self._in_write(self._save_approval_in, fit(APPROVALS, values), approval)

    def _save_approval_in(
        self, conn: Connection, values: dict[str, Any], approval: ApprovalRecord
    ) -> None:
        conn.execute(statements.upsert_approval(self.dialect, frozenset(values)), values)
        if approval.decision is not None:
            self._decide_approval(conn, approval)

    @staticmethod
    def _approval(row: RowMapping | None) -> ApprovalRecord | None:
        return ApprovalRecord.model_validate(dict(row)) if row else None

    async def get_approval(self, request_id: str) -> ApprovalRecord | None:
        return self._approval(
            await self._first(select(APPROVALS).where(APPROVALS.c.request_id == request_id))
        )

    async def get_approval_by_token_hash(self, token_hash: str) -> ApprovalRecord | None:
        async with self._read() as conn:
            row = (
                (await conn.execute(select(APPROVALS).where(APPROVALS.c.token_hash == token_hash)))
                .mappings()
                .first()
            )
        return self._approval(row)

    async def approvals_for_call(self, session_id: str, tool_use_id: str) -> list[ApprovalRecord]:
        query = (
            select(APPROVALS)
            .where(APPROVALS.c.session_id == session_id, APPROVALS.c.tool_use_id == tool_use_id)
            .order_by(APPROVALS.c.requested_at)
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ApprovalRecord.model_validate(dict(r)) for r in rows]

    async def waiting_approvals(
        self,
        *,
        project: str | None = None,
        session_id: str | None = None,
        tool_name: str | None = None,
        limit: int = 200,
    ) -> list[WaitingApproval]:
        """Undecided approval requests, newest first, with their session's project,
        their call's status (None for a composed tool's sub-call, which has no
        row) and its submitter: what an approver inbox lists, in one query.
        Expiry is the caller's to judge."""
        query = (
            select(APPROVALS, SESSIONS.c.project.label("_project"),
                   CALLS.c.status.label("_status"), SUBMISSIONS.c.key_id.label("_kid"),
                   SUBMISSIONS.c.key_name.label("_kname"))
            .join(SESSIONS, SESSIONS.c.session_id == APPROVALS.c.session_id)
            .outerjoin(CALLS, (CALLS.c.session_id == APPROVALS.c.session_id)
                       & (CALLS.c.tool_use_id == APPROVALS.c.tool_use_id))
            .outerjoin(SUBMISSIONS, (SUBMISSIONS.c.session_id == APPROVALS.c.session_id)
                       & (SUBMISSIONS.c.tool_use_id == APPROVALS.c.tool_use_id))
            .where(APPROVALS.c.decision.is_(None))
            .order_by(APPROVALS.c.requested_at.desc(), APPROVALS.c.request_id)
            .limit(max(1, min(int(limit), 1000)))
        )
        if project is not None:
            query = query.where(SESSIONS.c.project == project)
        if session_id:
            query = query.where(APPROVALS.c.session_id == session_id)
        if tool_name:
            query = query.where(APPROVALS.c.tool_name == tool_name)
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        out: list[WaitingApproval] = []
        for row in rows:
            data = dict(row)
            project_name = str(data.pop("_project"))
            status = data.pop("_status")
            kid, kname = data.pop("_kid"), data.pop("_kname")
            out.append(WaitingApproval(
                ApprovalRecord.model_validate(data), project_name,
                CallStatus(status) if status is not None else None,
                Submitter(key_id=kid, key_name=kname) if kid is not None else None,
            ))
        return out

    @classmethod
    def _decide_approval(cls, conn: Connection, approval: ApprovalRecord) -> bool:
        """Store the decision `approval` carries (first write wins), with who
        decided it and how (principal, claimed name, identity, votes)."""
        assert approval.decision is not None
        return cls._decide(
            conn, approval.request_id, approval.decision, approval.decided_by, approval.via,
            approval.reason, approval.decided_at,
            extra={
                "principal_id": approval.principal_id,
                "claimed_name": approval.claimed_name,
                "self_approved": approval.self_approved,
                "identity": approval.identity,
                "votes": approval.votes,
            },
        )

    @staticmethod
    def _decide(
        conn: Connection,
        request_id: str,
        decision: str,
        decided_by: str | None,
        via: str | None,
        reason: str | None,
        decided_at: datetime | None,
        *,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """First write wins; `extra` carries the principal, the claim and the votes."""
        principal = {k: v for k, v in (extra or {}).items() if v is not None}
        result = conn.execute(
            update(APPROVALS)
            .where(APPROVALS.c.request_id == request_id, APPROVALS.c.decision.is_(None))
            .values(
                **fit(
                    APPROVALS,
                    {
                        "decision": clean_text(decision),
                        "decided_by": clean_text(decided_by) if decided_by is not None else None,
                        "via": clean_text(via) if via is not None else None,
                        "reason": clean_text(reason) if reason is not None else None,
                        "decided_at": as_utc(decided_at) if decided_at else utcnow(),
                        **principal,
                    },
                )
            )
        )
        return bool(result.rowcount)

    async def decide_approval(
        self,
        request_id: str,
        decision: str,
        decided_by: str | None = None,
        via: str | None = None,
        reason: str | None = None,
        *,
        decided_at: datetime | None = None,
        principal: dict[str, Any] | None = None,
    ) -> tuple[bool, ApprovalRecord]:
        """Record a decision if none is stored yet (first write wins).

        `principal` carries principal_id / claimed_name / self_approved.
        Returns (won, the stored record — the winner's decision when lost).
        Raises ApprovalNotFoundError for an unknown request id.
        """
        def decide(conn: Connection) -> tuple[bool, RowMapping | None]:
            won = self._decide(conn, request_id, decision, decided_by, via, reason, decided_at,
                               extra=principal)
            query = select(APPROVALS).where(APPROVALS.c.request_id == request_id)
            return won, conn.execute(query).mappings().first()

        won, row = await self._in_write(decide)
        record = self._approval(row)
        if record is None:
            raise ApprovalNotFoundError(request_id)
        return won, record

