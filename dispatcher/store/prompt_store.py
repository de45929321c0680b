"""The prompts of Claude Code turns (session_prompts): what the user asked
that the turn's calls answer, and the permission mode it ran in (issue 25).

A prompt is recorded once per (session, prompt id, project of the key that
sent it; the audit reads the session's own project's): a retried hook, or a
later PreToolUse of the turn, never overwrites it; a PreToolUse fills in
only what is still unknown (the permission mode when no UserPromptSubmit
hook is installed).
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import Table, delete, exists, select, update
from sqlalchemy.engine import Connection

from parkgate.models import utcnow
from parkgate.store import statements
from parkgate.store.base import StoreBase, fit
from parkgate.store.models import Base
from parkgate.store.statements import CALLS

PROMPTS: Table = Base.metadata.tables["session_prompts"]


class SessionPrompt(BaseModel):
    """A stored turn prompt."""

    session_id: str
    prompt_id: str
    project: str
    prompt: str | None = None
    prompt_chars: int | None = None
    permission_mode: str | None = None
    recorded_by: str | None = None
    recorded_at: datetime

    @property
    def truncated(self) -> bool:
        return (self.prompt is not None and self.prompt_chars is not None
                and self.prompt_chars > len(self.prompt))


class PromptStore(StoreBase):
    """Turn prompts of Claude Code sessions."""

    async def record_prompt(
        self, session_id: str, prompt_id: str, *, project: str, prompt: str | None,
        max_chars: int, permission_mode: str | None, recorded_by: str | None,
    ) -> bool:
        """Record the turn's prompt (its first `max_chars` characters); False when
        the turn already had one (the first record stays)."""
        values = fit(PROMPTS, {
            "session_id": session_id, "prompt_id": prompt_id, "project": project,
            "prompt": prompt[:max_chars] if prompt is not None else None,
            "prompt_chars": len(prompt) if prompt is not None else None,
            "permission_mode": permission_mode, "recorded_by": recorded_by,
            "recorded_at": utcnow(),
        })

        def work(conn: Connection) -> bool:
            inserted = conn.execute(
                statements.insert(self.dialect, PROMPTS).values(**values)
                .on_conflict_do_nothing(index_elements=["session_id", "prompt_id", "project"])
            ).rowcount
            if inserted:
                return True
            # A row a PreToolUse made before its UserPromptSubmit: fill the prompt in.
            if prompt is not None:
                conn.execute(update(PROMPTS).where(
                    PROMPTS.c.session_id == session_id, PROMPTS.c.prompt_id == prompt_id,
                    PROMPTS.c.project == project, PROMPTS.c.prompt.is_(None),
                ).values(prompt=values["prompt"], prompt_chars=values["prompt_chars"]))
            return False

        return await self._in_write(work)

    async def get_prompt(
        self, session_id: str, prompt_id: str, project: str
    ) -> SessionPrompt | None:
        """The turn's prompt as `project` (the session's) recorded it."""
        row = await self._first(select(PROMPTS).where(
            PROMPTS.c.session_id == session_id, PROMPTS.c.prompt_id == prompt_id,
            PROMPTS.c.project == project))
        return SessionPrompt.model_validate(dict(row)) if row else None

    async def prune_prompts(self, cutoff: datetime) -> int:
        """Delete prompts recorded before `cutoff` whose turn has no call left
        (audit prune removed them): a prompt is kept as long as its calls."""
        calls_of_turn = exists().where(
            CALLS.c.session_id == PROMPTS.c.session_id, CALLS.c.turn_id == PROMPTS.c.prompt_id)
        async with self._write() as conn:
            result = await conn.execute(delete(PROMPTS).where(
                PROMPTS.c.recorded_at < cutoff, ~calls_of_turn))
        return int(result.rowcount or 0)
