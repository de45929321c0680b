"""workspace_holdings: projects own their ground (a workspace belongs to the project
that registered it first, or to projects an admin grants it to)

Existing sessions are carried over: each workspace path becomes the holding of
the project whose session registered it first. Where two projects already used
overlapping paths, both keep what they registered; a new registration of a path
another project holds needs a grant (`parkgate workspaces grant`).

Revision ID: 0018_workspace_ground
Revises: 0017_oidc_identity
Create Date: 2026-11-26
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_workspace_ground"
down_revision: str | None = "0017_oidc_identity"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    holdings = op.create_table(
        "workspace_holdings",
        sa.Column("path_hash", sa.String(length=64), nullable=False),
        sa.Column("project", sa.String(length=100), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("created_by", sa.String(length=240), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("path_hash", "project", name=op.f("pk_workspace_holdings")),
    )
    op.create_index(
        "ix_workspace_holdings_project", "workspace_holdings", ["project"], unique=False
    )
    sessions = sa.table(
        "sessions",
        sa.column("workspace_path", sa.Text()),
        sa.column("project", sa.String()),
        sa.column("registered_by", sa.String()),
        sa.column("created_at", TS),
    )
    rows = op.get_bind().execute(
        sa.select(sessions.c.workspace_path, sessions.c.project, sessions.c.registered_by,
                  sessions.c.created_at)
        .order_by(sessions.c.created_at, sessions.c.workspace_path)
    )
    first: dict[str, dict[str, object]] = {}
    for path, project, registered_by, created_at in rows:
        if path not in first:  # the project that registered it first owns it
            first[path] = {
                "path_hash": hashlib.sha256(path.encode("utf-8")).hexdigest(),
                "project": project, "path": path, "kind": "owner",
                "created_by": registered_by, "created_at": created_at,
            }
    if first:
        op.bulk_insert(holdings, list(first.values()))


def downgrade() -> None:
    op.drop_index("ix_workspace_holdings_project", table_name="workspace_holdings")
    op.drop_table("workspace_holdings")
