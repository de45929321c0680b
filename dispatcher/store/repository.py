"""The history store: one async SQLAlchemy repository for PostgreSQL and SQLite.

`Repository` is composed from one mixin per aggregate, all over the shared
engine and transactions of `StoreBase` (store/base.py):

- events and hash chains: store/event_store.py
- calls (rows written with their events): store/call_store.py
- approvals: store/approval_store.py
- sessions, submitters and API keys: store/session_store.py
- audit maintenance (verify, export, prune): store/audit_store.py
- sealed blobs: store/blob_store.py
- remembered decisions: store/remembered.py
- projects' workspaces (who holds which path): store/workspace_store.py
- Claude Code turns' prompts: store/prompt_store.py
- budgets' windows and calls' charges: store/budget_store.py

Writes (`apply`, `save_approval`, `decide_approval`, ...) are idempotent and
safe under concurrent callers; event appends for one session are serialized
(see event_store.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import URL, Connection

from parkgate.calls.events import ToolEvent
from parkgate.calls.records import ApprovalRecord, CallUpdate, HistoryStore
from parkgate.store.approval_store import ApprovalStore, WaitingApproval
from parkgate.store.audit_store import AuditStore, ExportFormat
from parkgate.store.blob_store import BlobTables
from parkgate.store.budget_store import BudgetStore
from parkgate.store.call_store import CallStore
from parkgate.store.engine import make_engine
from parkgate.store.errors import ApprovalNotFoundError
from parkgate.store.event_store import EventStore
from parkgate.store.prompt_store import PromptStore
from parkgate.store.remembered import RememberedRulesStore
from parkgate.store.session_store import API_KEY_PREFIX, SessionStore
from parkgate.store.statements import (
    API_KEYS,
    APPROVALS,
    BLOB_REFS,
    BLOBS,
    CALLS,
    CHAINS,
    CONFLICTS,
    EVENTS,
    SESSIONS,
    SUBMISSIONS,
    TERMINAL,
)
from parkgate.store.workspace_store import WorkspaceStore

__all__ = [
    "API_KEYS",
    "API_KEY_PREFIX",
    "APPROVALS",
    "BLOBS",
    "BLOB_REFS",
    "CALLS",
    "CHAINS",
    "CONFLICTS",
    "EVENTS",
    "SESSIONS",
    "SUBMISSIONS",
    "TERMINAL",
    "ExportFormat",
    "Repository",
    "WaitingApproval",
]


class Repository(
    AuditStore,
    CallStore,
    EventStore,
    BlobTables,
    ApprovalStore,
    SessionStore,
    RememberedRulesStore,
    WorkspaceStore,
    PromptStore,
    BudgetStore,
):
    """History, approvals, sessions and API keys over one async engine."""

    @classmethod
    async def connect(
        cls, url: str | URL, *, check_schema: bool = False, **engine_kwargs: Any
    ) -> Repository:
        """Open a repository; plain `postgresql://` / `sqlite:///` URLs are accepted.

        With `check_schema=True` a database that is not at the code's migration
        head raises SchemaError (one line) and the engine is disposed.
        """
        repo = cls(make_engine(url, **engine_kwargs))
        if check_schema:
            try:
                await repo.check_schema()
            except BaseException:
                await repo.close()
                raise
        return repo

    async def __aenter__(self) -> Repository:
        return self

    async def apply_decided(
        self,
        approval: ApprovalRecord,
        events: Sequence[ToolEvent],
        update: CallUpdate | None = None,
    ) -> None:
        """`decide_approval` (first write wins) and `apply`, in ONE transaction.

        The approved run's first write: the decision, tool.confirmation_resolved
        and tool.called with the running row, stored together before the tool
        starts (one write where there were three). Raises ApprovalNotFoundError,
        writing nothing, for an unknown request id.
        """
        assert approval.decision is not None
        await self._in_write(self._apply_decided_in, approval, events, update)
        self._committed(update)

    def _apply_decided_in(
        self,
        conn: Connection,
        approval: ApprovalRecord,
        events: Sequence[ToolEvent],
        update: CallUpdate | None,
    ) -> None:
        self._lock_sessions(conn, {approval.session_id})
        won = self._decide_approval(conn, approval)
        if not won:
            found = conn.execute(
                select(APPROVALS.c.request_id).where(
                    APPROVALS.c.request_id == approval.request_id
                )
            ).first()
            if found is None:
                raise ApprovalNotFoundError(approval.request_id)
        self._record_in(conn, events, update)

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _conforms(repo: Repository) -> HistoryStore:
    """Static check (mypy): Repository implements the HistoryStore protocol."""
    return repo
