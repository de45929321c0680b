"""The Alembic chain: up, down to base, up again; models and migrations agree."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from parkgate.store import Repository, SchemaNotMigratedError, SchemaTooNewError
from parkgate.store.engine import make_engine
from parkgate.store.migrate import (
    current_async,
    downgrade_async,
    head_revision,
    upgrade,
    upgrade_async,
)
from parkgate.store.models import Base
from parkgate.store.schema_check import script_head
from parkgate.store.statements import SESSIONS
from tests.fixtures.db import fresh_pg_database, fresh_sqlite_url

TABLES = {
    "tool_calls", "tool_events", "tool_event_chains", "approvals", "sessions", "api_keys",
    "call_submissions", "event_conflicts", "blobs", "blob_refs", "remembered_rules",
    "workspace_holdings", "session_prompts", "budget_windows", "budget_charges",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield fresh_sqlite_url(tmp_path)
        return
    request.getfixturevalue("pg_available")
    async with fresh_pg_database("parkgate_mig") as url:
        yield url


async def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
    finally:
        await engine.dispose()
    return names - {"alembic_version"}


async def _diff(url: str) -> list[object]:
    def compare(conn: Connection) -> list[object]:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))

    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(compare)
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_upgrade(empty_url: str) -> None:
    assert await current_async(empty_url) is None
    await upgrade_async(empty_url)
    assert await current_async(empty_url) == head_revision()
    assert await _tables(empty_url) == TABLES
    await downgrade_async(empty_url, "base")
    assert await current_async(empty_url) is None
    assert await _tables(empty_url) == set()
    await upgrade_async(empty_url)
    assert await _tables(empty_url) == TABLES


async def test_autogenerate_finds_no_difference(empty_url: str) -> None:
    assert len(await _diff(empty_url)) >= len(TABLES)  # the comparison does see tables
    await upgrade_async(empty_url)
    assert await _diff(empty_url) == []


async def test_check_schema_refuses_unmigrated_and_newer(empty_url: str) -> None:
    with pytest.raises(SchemaNotMigratedError, match="parkgate db upgrade"):
        await Repository.connect(empty_url, check_schema=True)
    await upgrade_async(empty_url)
    repo = await Repository.connect(empty_url, check_schema=True)
    try:
        assert await repo.check_schema() == head_revision()
        async with repo.engine.begin() as conn:
            await conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'ffff9999'")
        with pytest.raises(SchemaTooNewError, match="newer version") as info:
            await repo.check_schema()
        assert "\n" not in str(info.value)
    finally:
        await repo.close()


def test_plain_script_head_is_alembics_head() -> None:
    """The start-up check's Alembic-free reading of the scripts finds Alembic's head."""
    assert script_head() == head_revision()


def test_sync_upgrade_helper(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'dir' / 'p.db'}"  # plain scheme, missing dir
    upgrade(url)
    assert (tmp_path / "nested" / "dir" / "p.db").exists()


async def test_workspace_ground_carries_existing_sessions_over(empty_url: str) -> None:
    """0018: each workspace path of an existing session belongs to the project
    that registered it first; later claims are judged against it."""
    from datetime import UTC, datetime

    await upgrade_async(empty_url, "0017_oidc_identity")
    engine = make_engine(empty_url)
    sessions = [  # (session, workspace, project, registered at)
        ("s1", "/srv/a", "alpha", datetime(2026, 1, 1, tzinfo=UTC)),
        ("s2", "/srv/a", "beta", datetime(2026, 1, 2, tzinfo=UTC)),  # same path, later
        ("s3", "/srv/b", "beta", datetime(2026, 1, 3, tzinfo=UTC)),
        ("s4", "/srv/b", "beta", datetime(2026, 1, 4, tzinfo=UTC)),
    ]
    try:
        async with engine.begin() as conn:
            await conn.execute(SESSIONS.insert(), [
                {"session_id": sid, "workspace_path": path, "kind": "main", "created_at": at,
                 "project": project, "registered_by": "k1"}
                for sid, path, project, at in sessions
            ])
    finally:
        await engine.dispose()
    await upgrade_async(empty_url)
    repo = await Repository.connect(empty_url, check_schema=True)
    try:
        held = [(h.path, h.project, h.kind, h.created_by)
                for h in await repo.workspace_holdings()]
        assert held == [("/srv/a", "alpha", "owner", "k1"), ("/srv/b", "beta", "owner", "k1")]
        assert not (await repo.claim_workspace("/srv/a/x", "beta", by="k2")).allowed
        assert (await repo.claim_workspace("/srv/a/x", "alpha", by="k2")).allowed
        assert (await repo.claim_workspace("/srv/c", "beta", by="k2")).claim
    finally:
        await repo.close()
    await downgrade_async(empty_url, "0017_oidc_identity")
    assert "workspace_holdings" not in await _tables(empty_url)
