"""budget_windows, budget_charges: named budgets that park at the cap (issue 39)

Revision ID: 0021_budgets
Revises: 0020_session_prompts
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021_budgets"
down_revision: str | None = "0020_session_prompts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "budget_windows",
        sa.Column("budget", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("window_start", TS, nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("budget", "scope", "window_start",
                                name=op.f("pk_budget_windows")),
    )
    op.create_table(
        "budget_charges",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("budget", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("window_start", TS, nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("cap", sa.BigInteger(), nullable=False),
        sa.Column("used_before", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("settled_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("session_id", "tool_use_id", "budget",
                                name=op.f("pk_budget_charges")),
    )
    op.create_index("ix_budget_charges_window", "budget_charges",
                    ["budget", "scope", "window_start"])


def downgrade() -> None:
    op.drop_index("ix_budget_charges_window", table_name="budget_charges")
    op.drop_table("budget_charges")
    op.drop_table("budget_windows")
