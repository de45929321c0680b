"""identity: how the decider of an approval and a call was identified

Revision ID: 0017_oidc_identity
Revises: 0016_remembered_rules
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017_oidc_identity"
down_revision: str | None = "0016_remembered_rules"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    for table in ("approvals", "tool_calls"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("identity", JSONB, nullable=True))


def downgrade() -> None:
    for table in ("approvals", "tool_calls"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("identity")
