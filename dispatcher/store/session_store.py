"""Who calls: sessions (registered once, with their workspace and project),
the API key that submitted each call, and the API keys themselves (only a
key's hash is stored)."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from parkgate.approvals.access import DEFAULT_PROJECT, PROJECT_PATTERN, Submitter, normalize_roles
from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import StoreBase
from parkgate.store.canonical import clean_text
from parkgate.store.errors import (
    ApiKeyNameTakenError,
    ApiKeyNotFoundError,
    SessionConflictError,
)
from parkgate.store.results import ApiKeyRecord, SessionRecord
from parkgate.store.statements import API_KEYS, SESSIONS, SUBMISSIONS

API_KEY_PREFIX = "pgk_"
_LAST_USED_GRANULARITY = timedelta(seconds=60)


def _hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


class SessionStore(StoreBase):
    """Sessions, call submitters and API keys."""

    # ------------------------------------------------------------------ sessions
    async def register_session(
        self,
        session_id: str,
        workspace_path: str,
        kind: str = "main",
        *,
        project: str = DEFAULT_PROJECT,
        registered_by: str | None = None,
        worker_group: str | None = None,
        group_explicit: bool = False,
        client_tools: list[dict[str, Any]] | None = None,
    ) -> tuple[SessionRecord, bool]:
        """Register a session; re-registering with the same workspace is a no-op.

        Returns (record, created). A different workspace (or another project)
        for a known id raises SessionConflictError; so does an explicitly
        requested worker group other than the stored one. A group derived from
        settings does not: a known session keeps the group it was registered with.
        """
        async with self._write() as conn:
            result = await conn.execute(
                statements.insert(self.dialect, SESSIONS)
                .values(
                    session_id=session_id,
                    workspace_path=workspace_path,
                    kind=kind,
                    created_at=utcnow(),
                    project=project,
                    registered_by=registered_by,
                    worker_group=worker_group,
                    client_tools=client_tools or None,
                )
                .on_conflict_do_nothing(index_elements=["session_id"])
            )
            created = bool(result.rowcount)
            if not created and client_tools:
                # A known session declares its client tools again (an agent
                # restarted, perhaps upgraded): the latest declaration stands
                # for new calls; calls already started keep theirs.
                await conn.execute(
                    SESSIONS.update()
                    .where(SESSIONS.c.session_id == session_id, SESSIONS.c.project == project)
                    .values(client_tools=client_tools)
                )
            row = (
                (await conn.execute(select(SESSIONS).where(SESSIONS.c.session_id == session_id)))
                .mappings()
                .one()
            )
        record = SessionRecord.model_validate(dict(row))
        if record.project != project:
            raise SessionConflictError(session_id, None, workspace_path)
        if record.workspace_path != clean_text(workspace_path):
            raise SessionConflictError(session_id, record.workspace_path, workspace_path)
        if group_explicit and record.worker_group != worker_group:
            raise SessionConflictError(
                session_id, record.workspace_path, workspace_path,
                existing_group=record.worker_group, group=worker_group,
            )
        return record, created

    # ------------------------------------------------------------------ submitters
    async def record_submission(
        self, session_id: str, tool_use_ids: Sequence[str], key_id: str, key_name: str
    ) -> None:
        """Remember the key that submitted each call; the first submitter stays."""
        if not tool_use_ids:
            return
        now = utcnow()
        rows = [
            {"session_id": session_id, "tool_use_id": tool_use_id, "key_id": key_id,
             "key_name": clean_text(key_name)[:200], "submitted_at": now}
            for tool_use_id in tool_use_ids
        ]
        # One transaction through _in_write: on a SQLite file one hop to a
        # thread (it precedes every submitted call's start).
        await self._in_write(self._record_submission_in, rows)

    def _record_submission_in(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            conn.execute(
                statements.insert(self.dialect, SUBMISSIONS)
                .values(**row)
                .on_conflict_do_nothing(index_elements=["session_id", "tool_use_id"])
            )

    async def get_submitter(self, session_id: str, tool_use_id: str) -> Submitter | None:
        """The key that submitted this call first, or None (unknown/older calls)."""
        query = select(SUBMISSIONS.c.key_id, SUBMISSIONS.c.key_name).where(
            SUBMISSIONS.c.session_id == session_id, SUBMISSIONS.c.tool_use_id == tool_use_id
        )
        row = await self._first(query)
        return Submitter(key_id=row["key_id"], key_name=row["key_name"]) if row else None

    async def get_session(self, session_id: str) -> SessionRecord | None:
        row = await self._first(select(SESSIONS).where(SESSIONS.c.session_id == session_id))
        return SessionRecord.model_validate(dict(row)) if row else None

    # ------------------------------------------------------------------ API keys
    async def create_api_key(
        self,
        name: str,
        *,
        project: str = DEFAULT_PROJECT,
        roles: Sequence[str] = ("agent",),
    ) -> tuple[str, ApiKeyRecord]:
        """A new key: returns (the plaintext, shown once; the stored record).

        Raises ApiKeyNameTakenError when an active key already has the name,
        RoleError (a ValueError) for an unknown role.
        """
        name = name.strip()
        if not name or len(name) > 200:
            raise ValueError("an API key name must be 1-200 characters")
        if not re.fullmatch(PROJECT_PATTERN, project):
            raise ValueError("a project name is 1-100 letters, digits, _ . or -")
        role_list = normalize_roles(roles)
        plaintext = API_KEY_PREFIX + secrets.token_urlsafe(32)
        values = {
            "id": secrets.token_hex(8),
            "name": name,
            "key_hash": _hash_key(plaintext),
            "prefix": plaintext[:12],
            "created_at": utcnow(),
            "project": project,
            "roles": role_list,
            "migrated": False,
        }
        try:
            async with self._write() as conn:
                await conn.execute(API_KEYS.insert().values(**values))
        except IntegrityError as exc:
            raise ApiKeyNameTakenError(f"an active API key named {name!r} already exists") from exc
        return plaintext, ApiKeyRecord.model_validate(values)

    async def verify_api_key(self, plaintext: str) -> ApiKeyRecord | None:
        """The active key matching `plaintext`, or None (unknown or revoked)."""
        if not plaintext or not plaintext.startswith(API_KEY_PREFIX) or len(plaintext) > 200:
            return None
        key_hash = _hash_key(plaintext)
        row = await self._first(
            select(API_KEYS).where(API_KEYS.c.key_hash == key_hash, API_KEYS.c.revoked_at.is_(None))
        )
        if row is None:
            return None
        record = ApiKeyRecord.model_validate(dict(row))
        now = utcnow()
        if record.last_used_at is None or now - record.last_used_at > _LAST_USED_GRANULARITY:
            async with self._write() as conn:
                await conn.execute(
                    update(API_KEYS).where(API_KEYS.c.id == record.id).values(last_used_at=now)
                )
            record.last_used_at = now
        return record

    async def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The active (not revoked) key with this id, or None: one indexed read."""
        query = select(API_KEYS).where(API_KEYS.c.id == key_id, API_KEYS.c.revoked_at.is_(None))
        async with self._read() as conn:
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else ApiKeyRecord.model_validate(dict(row))

    async def list_api_keys(self, include_revoked: bool = True) -> list[ApiKeyRecord]:
        query = select(API_KEYS).order_by(API_KEYS.c.created_at, API_KEYS.c.id)
        if not include_revoked:
            query = query.where(API_KEYS.c.revoked_at.is_(None))
        async with self._read() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [ApiKeyRecord.model_validate(dict(r)) for r in rows]

    async def revoke_api_key(self, name_or_id: str) -> ApiKeyRecord:
        """Revoke the active key with this name or id; ApiKeyNotFoundError otherwise."""
        now = utcnow()
        match = and_(
            or_(API_KEYS.c.id == name_or_id, API_KEYS.c.name == name_or_id),
            API_KEYS.c.revoked_at.is_(None),
        )
        async with self._write() as conn:
            row = (await conn.execute(select(API_KEYS).where(match))).mappings().first()
            if row is None:
                raise ApiKeyNotFoundError(f"no active API key named or with id {name_or_id!r}")
            await conn.execute(
                update(API_KEYS).where(API_KEYS.c.id == row["id"]).values(revoked_at=now)
            )
        record = ApiKeyRecord.model_validate(dict(row))
        record.revoked_at = now
        return record

