"""event_conflicts: event writes that contradicted a stored event of the same id

Revision ID: 0012_event_conflicts
Revises: 0014_projects_roles
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012_event_conflicts"
down_revision: str | None = "0014_projects_roles"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model column types (migrations never import app code).
TS = sa.DateTime(timezone=True)
JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "event_conflicts",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("stored", JSONB, nullable=False),
        sa.Column("attempted", JSONB, nullable=False),
        sa.Column("detected_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_event_conflicts")),
    )
    op.create_index(
        "ix_event_conflicts_call",
        "event_conflicts",
        ["session_id", "tool_use_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_event_conflicts_call", table_name="event_conflicts")
    op.drop_table("event_conflicts")
