"""Client-executed calls: the API over a real worker, the Temporal dev server and
Postgres (`api_pg`), with a client tool declared by the session."""

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
    """The app on Postgres; WRITE/EXECUTE prompt, READ auto."""
    async with api_rig(dev_temporal, pg_repo, tmp_path) as rig:
        yield rig
