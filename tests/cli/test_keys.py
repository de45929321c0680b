"""`parkgate keys create|list|revoke` against a real (SQLite) database."""

from __future__ import annotations

import asyncio
import re

from typer.testing import CliRunner

from dispatcher.cli import app
from dispatcher.settings import get_settings
from dispatcher.store.repository import Repository

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
    missing = runner.invoke(app, ["keys", "list"])
    assert missing.exit_code == 1
    lines = [ln for ln in missing.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not migrated" in lines[0]
