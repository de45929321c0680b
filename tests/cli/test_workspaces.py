"""`parkgate workspaces list|grant|revoke` against a real (SQLite) database."""

from __future__ import annotations

import asyncio
from pathlib import Path

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


def test_workspace_roots_add_list_remove(cli_env: dict[str, str], tmp_path: Path) -> None:
    """Roots added here extend workspace_roots for the settings every process loads
    (the API re-reads them at each check); removing one takes it back."""
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    extra = tmp_path / "srv"
    extra.mkdir()
    work = (tmp_path / "work").resolve()
    assert get_settings().workspace_roots_for("default") == [work]
    added = runner.invoke(app, ["workspaces", "roots", "add", str(extra)])
    assert added.exit_code == 0, added.output
    assert get_settings().workspace_roots_for("default") == [work, extra.resolve()]
    assert extra.resolve() in get_settings().tool_workspace_roots()
    again = runner.invoke(app, ["workspaces", "roots", "add", str(extra)])
    assert again.exit_code == 0 and "already a workspace root" in again.stdout
    listed = runner.invoke(app, ["workspaces", "roots", "list"])
    assert listed.stdout.splitlines() == [f"{work}  (setting workspace_roots)",
                                          f"{extra.resolve()}  (added)"]
    missing = runner.invoke(app, ["workspaces", "roots", "add", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not an existing directory" in missing.stderr
    setting = runner.invoke(app, ["workspaces", "roots", "remove", str(work)])
    assert setting.exit_code == 2
    assert "comes from the workspace_roots setting" in setting.stderr
    removed = runner.invoke(app, ["workspaces", "roots", "remove", str(extra)])
    assert removed.exit_code == 0, removed.output
    assert get_settings().workspace_roots_for("default") == [work]
