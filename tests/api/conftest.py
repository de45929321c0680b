"""API test fixtures: one Temporal dev server client per session (real time, so
long-polls and approval expiries behave as in production)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.runtime.devserver import DevServer
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.fixtures.temporal import dev_client


@pytest.fixture(scope="session")
async def dev_temporal(dev_server: DevServer) -> Client:
    return await dev_client(dev_server)


@pytest.fixture
async def api(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> AsyncIterator[ApiRig]:
    """The app on SQLite; WRITE/EXECUTE prompt, READ auto."""
    async with api_rig(dev_temporal, sqlite_repo, tmp_path) as rig:
        yield rig
