"""Sealed blobs (large payloads moved out of Temporal histories, see
parkgate.durable.blobs): stored once by content id, with the workflows that
refer to them, and pruned when no retained call refers to them."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, exists, literal, or_, select
from sqlalchemy.engine import Connection

from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import StoreBase
from parkgate.store.statements import BLOB_REFS, BLOBS, CALLS
from parkgate.store.types import as_utc


class BlobTables(StoreBase):
    """The `blobs` and `blob_refs` tables: content-addressed blobs and who refers
    to them (the store side of parkgate.durable.blobs.BlobStore)."""

    async def put_blob(self, blob_id: str, data: bytes, size: int, workflow_id: str) -> None:
        """Store a sealed blob once (content-addressed) and the workflow that refers to it.

        Idempotent: the same id is written once; each (blob, workflow) pair once.
        """
        now = utcnow()
        blob = {"id": blob_id, "size": size, "data": data, "created_at": now}
        ref = {"blob_id": blob_id, "workflow_id": workflow_id[:500], "created_at": now}

        def work(conn: Connection) -> None:
            conn.execute(
                statements.insert(self.dialect, BLOBS)
                .values(**blob)
                .on_conflict_do_nothing(index_elements=["id"])
            )
            conn.execute(
                statements.insert(self.dialect, BLOB_REFS)
                .values(**ref)
                .on_conflict_do_nothing(index_elements=["blob_id", "workflow_id"])
            )

        await self._in_write(work)

    async def get_blob(self, blob_id: str) -> bytes | None:
        """The sealed content of a blob, or None when it is not stored."""
        async with self._read() as conn:
            row = (await conn.execute(select(BLOBS.c.data).where(BLOBS.c.id == blob_id))).first()
        return None if row is None else bytes(row.data)

    async def blob_ids(self) -> list[str]:
        """Every stored blob id (for tests and `audit` tooling)."""
        async with self._read() as conn:
            return [r.id for r in await conn.execute(select(BLOBS.c.id).order_by(BLOBS.c.id))]

    async def prune_blobs(self, older_than: timedelta, *, now: datetime | None = None) -> int:
        """Delete blobs no retained call refers to; returns how many blobs went.

        A reference stays while its workflow is a call (`call/<session>/<id>`)
        or a turn (`turn/<session>/...`) with a row in tool_calls, or while it
        is younger than the cutoff (a call being started has no row yet).
        """
        cutoff = as_utc(now or utcnow()) - older_than
        call_wf = literal("call/") + CALLS.c.session_id + literal("/") + CALLS.c.tool_use_id
        turn_wf = literal("turn/") + CALLS.c.session_id + literal("/%")
        retained = or_(
            exists().where(call_wf == BLOB_REFS.c.workflow_id),
            exists().where(BLOB_REFS.c.workflow_id.like(turn_wf)),
        )
        async with self._write() as conn:
            await conn.execute(
                delete(BLOB_REFS).where(BLOB_REFS.c.created_at < cutoff, ~retained)
            )
            result = await conn.execute(
                delete(BLOBS).where(
                    BLOBS.c.created_at < cutoff,
                    ~exists().where(BLOB_REFS.c.blob_id == BLOBS.c.id),
                )
            )
            return int(result.rowcount or 0)


