"""`parkgate workspaces list|grant|revoke` against a real (SQLite) database."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.settings import get_settings
from parkgate.store.repository import Repository
from parkgate.workspaces.ground import Verdict

runner = CliRunner()


def _claim(path: str, project: str) -> Verdict:
    async def claim() -> Verdict:
        repo = await Repository.connect(get_settings().effective_database_url)
        try:
            return await repo.claim_workspace(path, project, by="key")
        finally:
            await repo.close()

    return asyncio.run(claim())


def test_grant_list_revoke(cli_env: dict[str, str]) -> None:
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    assert _claim("/srv/a", "alpha").claim
    assert not _claim("/srv/a/x", "beta").allowed
    granted = runner.invoke(app, ["workspaces", "grant", "/srv/a/x/", "--project", "beta"])
    assert granted.exit_code == 0, granted.output
    assert "granted /srv/a/x to project beta" in granted.stdout
    assert _claim("/srv/a/x/y", "beta").allowed
    listed = runner.invoke(app, ["workspaces", "list"])
    assert listed.exit_code == 0
    assert "/srv/a" in listed.stdout and "grant" in listed.stdout and "owner" in listed.stdout
    assert "cli:" in listed.stdout
    revoked = runner.invoke(app, ["workspaces", "revoke", "/srv/a/x", "--project", "beta"])
    assert revoked.exit_code == 0, revoked.output
    assert not _claim("/srv/a/x/y", "beta").allowed
    again = runner.invoke(app, ["workspaces", "revoke", "/srv/a/x", "--project", "beta"])
    assert again.exit_code == 2
    assert again.stderr.strip() == "parkgate: error: project beta holds no grant of /srv/a/x"
    # Releasing an owner's hold lets another project claim the path.
    released = runner.invoke(app, ["workspaces", "revoke", "/srv/a", "-p", "alpha", "--owner"])
    assert released.exit_code == 0, released.output
    assert _claim("/srv/a/x", "beta").claim
    bad = runner.invoke(app, ["workspaces", "grant", "relative", "--project", "beta"])
    assert bad.exit_code == 2 and "absolute" in bad.stderr
    bad = runner.invoke(app, ["workspaces", "grant", "/x", "--project", "no spaces"])
    assert bad.exit_code == 2 and "--project" in bad.stderr
