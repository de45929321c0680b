"""session_prompts: the prompt and permission mode of a Claude Code turn (issue 25)

Revision ID: 0020_session_prompts
Revises: 0019_session_client_tools
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_session_prompts"
down_revision: str | None = "0019_session_client_tools"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "session_prompts",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("prompt_id", sa.String(length=200), nullable=False),
        sa.Column("project", sa.String(length=100), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=True),
        sa.Column("prompt_chars", sa.Integer(), nullable=True),
        sa.Column("permission_mode", sa.String(length=32), nullable=True),
        sa.Column("recorded_by", sa.String(length=32), nullable=True),
        sa.Column("recorded_at", TS, nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "prompt_id", "project", name=op.f("pk_session_prompts")),
    )


def downgrade() -> None:
    op.drop_table("session_prompts")
