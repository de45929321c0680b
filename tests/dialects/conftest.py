"""Agents' hook dialects: the endpoint over a real worker, the Temporal dev
server and Postgres (`api_pg`: READ auto, WRITE/EXECUTE prompt)."""

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
async def api_pg(dev_temporal: Client, pg_repo: Repository, tmp_path: Path
                 ) -> AsyncIterator[ApiRig]:
    """The app on Postgres, not served (hook requests over ASGI); a short hold."""
    async with api_rig(dev_temporal, pg_repo, tmp_path, codex_wait_seconds=1.5,
                       gemini_wait_seconds=1.5, opencode_wait_seconds=1.5) as rig:
        yield rig
