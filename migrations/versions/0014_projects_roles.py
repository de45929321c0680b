"""projects and roles on API keys, session projects, call submitters, decider principals

Existing keys move to project `default` with every role (what they could do
before roles existed) and are flagged `migrated` so `keys list` shows them;
existing sessions belong to project `default`.

Revision ID: 0014_projects_roles
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014_projects_roles"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)
JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
#: Every role a key held before roles existed.
ALL_ROLES = ["admin", "agent", "approver", "auditor"]


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(
            sa.Column("project", sa.String(length=100), server_default="default", nullable=False)
        )
        batch.add_column(sa.Column("roles", JSONB, nullable=True))
        batch.add_column(
            sa.Column("migrated", sa.Boolean(), server_default=sa.text("false"), nullable=False)
        )
    # A literal (not a bound parameter) so both backends read it as JSON.
    roles = json.dumps(ALL_ROLES).replace("'", "''")
    op.execute(
        sa.text(f"UPDATE api_keys SET roles = '{roles}', migrated = TRUE WHERE roles IS NULL")
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.alter_column("roles", existing_type=JSONB, nullable=False)

    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("project", sa.String(length=100), server_default="default", nullable=False)
        )
        batch.add_column(sa.Column("registered_by", sa.String(length=32), nullable=True))

    for table in ("tool_calls", "approvals"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("principal_id", sa.String(length=240), nullable=True))
            batch.add_column(sa.Column("claimed_name", sa.String(length=200), nullable=True))
            batch.add_column(sa.Column("self_approved", sa.Boolean(), nullable=True))
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("votes", JSONB, nullable=True))

    op.create_table(
        "call_submissions",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("key_name", sa.String(length=200), nullable=False),
        sa.Column("submitted_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "tool_use_id", name=op.f("pk_call_submissions")),
    )


def downgrade() -> None:
    op.drop_table("call_submissions")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("votes")
    for table in ("approvals", "tool_calls"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("self_approved")
            batch.drop_column("claimed_name")
            batch.drop_column("principal_id")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("registered_by")
        batch.drop_column("project")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("migrated")
        batch.drop_column("roles")
        batch.drop_column("project")
