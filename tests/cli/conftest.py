"""CLI test isolation: a private data dir, no inherited PARKGATE_* settings."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from parkgate.settings import get_settings


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """PARKGATE_* cleared, data dir and workspace root under tmp_path; returns the env."""
    for key in list(os.environ):
        if key.startswith("PARKGATE_"):
            monkeypatch.delenv(key)
    data = tmp_path / "data"
    work = tmp_path / "work"
    work.mkdir()
    # `--config` sets PARKGATE_CONFIG in os.environ; registering it here makes
    # monkeypatch remove it again after the test (empty = no explicit file).
    monkeypatch.setenv("PARKGATE_CONFIG", "")
    monkeypatch.setenv("PARKGATE_DATA_DIR", str(data))
    monkeypatch.setenv("PARKGATE_WORKSPACE_ROOTS", f'["{work}"]')
    get_settings.cache_clear()
    yield {k: v for k, v in os.environ.items()}
    get_settings.cache_clear()


def parkgate_argv() -> list[str]:
    """How to run the CLI as a subprocess (works without the console script)."""
    return [sys.executable, "-m", "parkgate.cli"]


@pytest.fixture(autouse=True)
def wide_cli_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process CLI runs print 200 columns wide whichever test imported the CLI first:
    its consoles (parkgate.cli.common) read COLUMNS once, when made, so CliRunner's
    `env={"COLUMNS": "200"}` came too late whenever another test had imported them
    (under pytest-xdist, tables wrapped at 80 columns and the checks missed cells)."""
    from parkgate.cli import common

    for console in (common.console, common.err_console):
        monkeypatch.setattr(console, "_width", 200)
