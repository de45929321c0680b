"""blobs and blob_refs: large Temporal payloads stored once, by reference

Revision ID: 0013_blobs
Revises: 0012_event_conflicts
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_blobs"
down_revision: str | None = "0012_event_conflicts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_blobs")),
    )
    op.create_table(
        "blob_refs",
        sa.Column("blob_id", sa.String(length=64), nullable=False),
        sa.Column("workflow_id", sa.String(length=500), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("blob_id", "workflow_id", name=op.f("pk_blob_refs")),
    )
    op.create_index("ix_blob_refs_workflow", "blob_refs", ["workflow_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_blob_refs_workflow", table_name="blob_refs")
    op.drop_table("blob_refs")
    op.drop_table("blobs")
