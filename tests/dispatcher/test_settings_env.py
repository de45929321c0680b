"""Settings.to_env(): what a parent hands a worker/API child reads back identically."""

from __future__ import annotations

from pathlib import Path

import pytest

from parkgate.settings import Settings


def test_to_env_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = Settings(
        data_dir=tmp_path,
        database_url="postgresql://db/x",
        link_secret="s3cret",
        temporal_tls=True,
        workspace_roots=[tmp_path],
        tool_confirmation={"default": {"WRITE": "auto"}},
        approval_expiry_by_class={"write": 60.0},
        webhooks=[{"url": "http://127.0.0.1:9/hook", "kind": "slack"}],
        max_cached_workflows=7,
    )
    env = original.to_env()
    assert "PARKGATE_TEMPORAL_API_KEY" not in env  # unset optionals are left out
    monkeypatch.delenv("PARKGATE_CONFIG", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Settings().model_dump() == original.model_dump()
