"""remembered_rules: approvers' remembered decisions (allow the same call again)

Revision ID: 0016_remembered_rules
Revises: 0015_session_worker_group
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_remembered_rules"
down_revision: str | None = "0015_session_worker_group"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "remembered_rules",
        sa.Column("rule_id", sa.String(length=40), nullable=False),
        sa.Column("project", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("workspace_path", sa.Text(), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("match", sa.String(length=16), nullable=False),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("command_prefix", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=True),
        sa.Column("principal_id", sa.String(length=240), nullable=True),
        sa.Column("approver", sa.String(length=200), nullable=True),
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("rule_id", name=op.f("pk_remembered_rules")),
        sa.UniqueConstraint("request_id", name=op.f("uq_remembered_rules_request_id")),
    )
    op.create_index(
        "ix_remembered_rules_lookup",
        "remembered_rules",
        ["project", "tool_name", "expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_remembered_rules_lookup", table_name="remembered_rules")
    op.drop_table("remembered_rules")
