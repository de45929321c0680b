"""history store: calls, hash-chained events, approvals, sessions, API keys

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the model column types (migrations never import app code).
TS = sa.DateTime(timezone=True)
JSONB = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_used_at", TS, nullable=True),
        sa.Column("revoked_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(
        "uq_api_keys_active_name",
        "api_keys",
        ["name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
        sqlite_where=sa.text("revoked_at IS NULL"),
    )

    op.create_table(
        "approvals",
        sa.Column("request_id", sa.String(length=200), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("requested_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=True),
        sa.Column("info", JSONB, nullable=False),
        sa.Column("decision", sa.String(length=32), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("via", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("decided_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_approvals")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_approvals_token_hash")),
    )
    op.create_index("ix_approvals_call", "approvals", ["session_id", "tool_use_id"], unique=False)
    op.create_index("ix_approvals_pending", "approvals", ["decision", "expires_at"], unique=False)

    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("workspace_path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_sessions")),
    )
    op.create_table(
        "tool_calls",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("turn_id", sa.String(length=200), nullable=True),
        sa.Column("tool_name", sa.String(length=200), nullable=True),
        sa.Column("side_effects", sa.String(length=16), nullable=True),
        sa.Column("input", JSONB, nullable=True),
        sa.Column("input_hash", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=32), nullable=True),
        sa.Column("rule", sa.Text(), nullable=True),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("decision", sa.String(length=32), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.Column("via", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error_class", sa.String(length=32), nullable=True),
        sa.Column("result", JSONB, nullable=True),
        sa.Column("full_output", JSONB, nullable=True),
        sa.Column("parent_tool_use_id", sa.String(length=200), nullable=True),
        sa.Column("workflow_id", sa.String(length=500), nullable=True),
        sa.Column("run_id", sa.String(length=100), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_calls")),
        sa.UniqueConstraint(
            "session_id", "tool_use_id", name=op.f("uq_tool_calls_session_id_tool_use_id")
        ),
    )
    op.create_index("ix_tool_calls_created", "tool_calls", ["created_at", "id"], unique=False)
    op.create_index(
        "ix_tool_calls_decided_by", "tool_calls", ["decided_by", "created_at"], unique=False
    )
    op.create_index("ix_tool_calls_finished", "tool_calls", ["finished_at"], unique=False)
    op.create_index(
        "ix_tool_calls_parent", "tool_calls", ["session_id", "parent_tool_use_id"], unique=False
    )
    op.create_index(
        "ix_tool_calls_session_created",
        "tool_calls",
        ["session_id", "created_at", "id"],
        unique=False,
    )
    op.create_index(
        "ix_tool_calls_status_created", "tool_calls", ["status", "created_at", "id"], unique=False
    )
    op.create_index(
        "ix_tool_calls_tool_created", "tool_calls", ["tool_name", "created_at", "id"], unique=False
    )
    op.create_index("ix_tool_calls_turn", "tool_calls", ["turn_id"], unique=False)

    op.create_table(
        "tool_event_chains",
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("chain_id", sa.String(length=200), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("head_hash", sa.String(length=64), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "chain_id", name=op.f("pk_tool_event_chains")),
    )
    op.create_table(
        "tool_events",
        sa.Column("seq", BIGID, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=False),
        sa.Column("chain_id", sa.String(length=200), nullable=False),
        sa.Column("chain_index", sa.Integer(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=64), nullable=False),
        sa.Column("turn_id", sa.String(length=200), nullable=False),
        sa.Column("tool_use_id", sa.String(length=200), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("side_effects", sa.String(length=16), nullable=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("request_id", sa.String(length=200), nullable=True),
        sa.Column("error_class", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("parent_tool_use_id", sa.String(length=200), nullable=True),
        sa.Column("data", JSONB, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_tool_events")),
        sa.UniqueConstraint("event_id", name=op.f("uq_tool_events_event_id")),
        sa.UniqueConstraint(
            "session_id",
            "chain_id",
            "chain_index",
            name=op.f("uq_tool_events_session_id_chain_id_chain_index"),
        ),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_tool_events_call", "tool_events", ["session_id", "tool_use_id"], unique=False
    )
    op.create_index(
        "ix_tool_events_parent", "tool_events", ["session_id", "parent_tool_use_id"], unique=False
    )
    op.create_index(
        "ix_tool_events_session_seq", "tool_events", ["session_id", "seq"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_tool_events_session_seq", table_name="tool_events")
    op.drop_index("ix_tool_events_parent", table_name="tool_events")
    op.drop_index("ix_tool_events_call", table_name="tool_events")

    op.drop_table("tool_events")
    op.drop_table("tool_event_chains")
    op.drop_index("ix_tool_calls_turn", table_name="tool_calls")
    op.drop_index("ix_tool_calls_tool_created", table_name="tool_calls")
    op.drop_index("ix_tool_calls_status_created", table_name="tool_calls")
    op.drop_index("ix_tool_calls_session_created", table_name="tool_calls")
    op.drop_index("ix_tool_calls_parent", table_name="tool_calls")
    op.drop_index("ix_tool_calls_finished", table_name="tool_calls")
    op.drop_index("ix_tool_calls_decided_by", table_name="tool_calls")
    op.drop_index("ix_tool_calls_created", table_name="tool_calls")

    op.drop_table("tool_calls")
    op.drop_table("sessions")
    op.drop_index("ix_approvals_pending", table_name="approvals")
    op.drop_index("ix_approvals_call", table_name="approvals")

    op.drop_table("approvals")
    op.drop_index(
        "uq_api_keys_active_name",
        table_name="api_keys",
        postgresql_where=sa.text("revoked_at IS NULL"),
        sqlite_where=sa.text("revoked_at IS NULL"),
    )

    op.drop_table("api_keys")
