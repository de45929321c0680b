"""Issue 40 (2): the first call outside the workspace roots says what to change,
and `parkgate workspaces roots add` lets the running API accept it (no restart)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.settings import get_settings
from parkgate.store.repository import Repository
from tests.api.rig import api_rig


async def test_roots_added_from_the_cli_reach_the_running_api(
    temporal_env: WorkflowEnvironment, sqlite_repo: Repository, sqlite_url: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    outside = tmp_path / "elsewhere" / "proj"
    outside.mkdir(parents=True)
    async with api_rig(temporal_env.client, sqlite_repo, tmp_path) as api:
        body = {"session_id": "roots-1", "workspace_path": str(outside)}
        refused = await api.http.post("/v1/sessions", json=body)
        assert refused.status_code == 422
        error = refused.json()["error"]
        assert error["code"] == "workspace_not_allowed"
        message = error["message"]
        assert str(outside) in message and str(api.workspace.resolve()) in message
        assert "workspace_roots" in message and "PARKGATE_WORKSPACE_ROOTS" in message
        assert f"parkgate workspaces roots add {outside}" in message
        assert error["details"]["workspace_path"] == str(outside)

        # The operator runs the command the message names, against this stack.
        data_dir = api.rig.settings.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("PARKGATE_DATA_DIR", str(data_dir))
        monkeypatch.setenv("PARKGATE_DATABASE_URL", sqlite_url)
        monkeypatch.setenv("PARKGATE_CONFIG", "")
        get_settings.cache_clear()
        try:
            added = CliRunner().invoke(app, ["workspaces", "roots", "add", str(outside.parent)])
            assert added.exit_code == 0, added.output
            listed = CliRunner().invoke(app, ["workspaces", "roots", "list"])
        finally:
            get_settings.cache_clear()
        assert f"{outside.parent}  (added)" in listed.stdout

        accepted = await api.http.post("/v1/sessions", json=body)
        assert accepted.status_code == 201, accepted.text
        assert accepted.json()["workspace_path"] == str(outside)
