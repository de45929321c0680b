"""`parkgate keys create|list|revoke` against a real (SQLite) database."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.cli.common import console
from parkgate.settings import get_settings
from parkgate.store.repository import Repository
from parkgate.store.results import ApiKeyRecord

runner = CliRunner()


def _verify(key: str) -> bool:
    async def check() -> bool:
        repo = await Repository.connect(get_settings().effective_database_url)
        try:
            return await repo.verify_api_key(key) is not None
        finally:
            await repo.close()

    return asyncio.run(check())


def test_create_list_revoke(cli_env: dict[str, str]) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    created = runner.invoke(app, ["keys", "create", "--name", "ci-bot"])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert re.fullmatch(r"pgk_[A-Za-z0-9_\-]{20,}", key), created.stdout
    assert "shown only once" in created.stderr
    assert _verify(key)
    listed = runner.invoke(app, ["keys", "list"])
    assert listed.exit_code == 0
    assert "ci-bot" in listed.stdout and "active" in listed.stdout
    assert key not in listed.stdout  # only the prefix is ever shown
    dup = runner.invoke(app, ["keys", "create", "--name", "ci-bot"])
    assert dup.exit_code == 2 and "already exists" in dup.stderr
    revoked = runner.invoke(app, ["keys", "revoke", "ci-bot"])
    assert revoked.exit_code == 0 and "revoked" in revoked.stdout
    assert not _verify(key)
    again = runner.invoke(app, ["keys", "revoke", "ci-bot"])
    assert again.exit_code == 2
    assert again.stderr.strip().startswith("parkgate: error: no active API key")
    active = runner.invoke(app, ["keys", "list", "--active"])
    assert active.exit_code == 0 and "ci-bot" not in active.stdout


def test_bad_name_and_unmigrated_database(cli_env: dict[str, str]) -> None:
    empty = runner.invoke(app, ["keys", "create", "--name", "  "])
    assert empty.exit_code == 2 and "--name" in empty.stderr
    data = Path(cli_env["PARKGATE_DATA_DIR"])
    data.mkdir()
    (data / "parkgate.db").touch()  # a database, never migrated
    missing = runner.invoke(app, ["keys", "list"])
    assert missing.exit_code == 1
    lines = [ln for ln in missing.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not migrated" in lines[0]


def test_a_data_directory_with_no_stack_says_so(cli_env: dict[str, str]) -> None:
    """A mistyped PARKGATE_DATA_DIR: `db upgrade` advice would create a fresh
    database in the wrong place; the error names the directory and the setting."""
    data = cli_env["PARKGATE_DATA_DIR"]
    for argv in (["keys", "list"], ["calls", "list"], ["workspaces", "roots", "list"]):
        missing = runner.invoke(app, argv)
        assert missing.exit_code == 1, argv
        assert missing.stderr.strip() == (
            f"parkgate: error: no parkgate stack found in {data} (PARKGATE_DATA_DIR): it does "
            "not exist; point PARKGATE_DATA_DIR at the data directory `parkgate serve` uses, "
            "or start a stack there with `parkgate serve`"), argv
    Path(data).mkdir()
    empty = runner.invoke(app, ["keys", "list"])
    assert empty.exit_code == 1 and "it holds no parkgate.db" in empty.stderr
    assert "db upgrade" not in empty.stderr
    assert not (Path(data) / "parkgate.db").exists()


def _record(key: str) -> ApiKeyRecord | None:
    async def check() -> ApiKeyRecord | None:
        repo = await Repository.connect(get_settings().effective_database_url)
        try:
            return await repo.verify_api_key(key)
        finally:
            await repo.close()

    return asyncio.run(check())


@pytest.fixture
def wide() -> Iterator[None]:
    """A wide table, so roles are not wrapped across lines."""
    before = console._width
    console.width = 200
    yield
    console._width = before


@pytest.mark.usefixtures("wide")
def test_create_with_project_and_roles(cli_env: dict[str, str]) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    made = runner.invoke(
        app, ["keys", "create", "--name", "oncall", "--project", "payments",
              "--role", "approver", "--role", "auditor"],
    )
    assert made.exit_code == 0, made.output
    record = _record(made.stdout.strip())
    assert record is not None
    assert (record.project, record.roles) == ("payments", ["approver", "auditor"])
    plain = runner.invoke(app, ["keys", "create", "--name", "bot"])
    record = _record(plain.stdout.strip())
    assert record is not None and (record.project, record.roles) == ("default", ["agent"])
    listed = runner.invoke(app, ["keys", "list"])
    assert "payments" in listed.stdout and "approver,auditor" in listed.stdout
    assert "migrated" not in listed.stdout
    bad = runner.invoke(app, ["keys", "create", "--name", "x", "--role", "root"])
    assert bad.exit_code == 2 and "unknown role 'root'" in bad.stderr
    bad = runner.invoke(app, ["keys", "create", "--name", "x", "--project", "a b"])
    assert bad.exit_code == 2 and "--project" in bad.stderr


@pytest.mark.usefixtures("wide")
def test_keys_from_before_roles_are_flagged(cli_env: dict[str, str]) -> None:
    """A key created at revision 0001 migrates to project default with every role."""
    from parkgate.store.migrate import upgrade_async

    url = get_settings().effective_database_url

    async def old_key() -> None:
        await upgrade_async(url, "0001")
        repo = await Repository.connect(url)
        try:
            async with repo.engine.begin() as conn:
                await conn.execute(text(
                    "INSERT INTO api_keys (id, name, key_hash, prefix, created_at) "
                    "VALUES ('k1', 'legacy', 'h', 'pgk_x', '2026-01-01 00:00:00')"
                ))
        finally:
            await repo.close()
        await upgrade_async(url)

    asyncio.run(old_key())
    listed = runner.invoke(app, ["keys", "list"])
    assert listed.exit_code == 0, listed.output
    assert "admin,agent,approver,auditor (migrated*)" in listed.stdout
    assert "created before roles existed" in listed.stderr
