"""A served parkgate (API on a socket, worker, Temporal dev server, Postgres)
for the real agent CLIs to post their hook events to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.runtime.devserver import DevServer
from parkgate.store.repository import Repository
from parkgate.store.results import CallRecord
from tests.api.rig import ApiRig, api_rig, free_socket, live_server
from tests.fixtures.temporal import dev_client


@dataclass
class Gate:
    """parkgate served at `url`; `home` is the agent's HOME."""

    api: ApiRig
    url: str
    home: Path

    async def call(self, tool_use_id: str) -> CallRecord | None:
        """The stored call with this id, in whatever session the agent opened."""
        page = await self.api.repo.list_calls(limit=100)
        return next((c for c in page.items if c.tool_use_id == tool_use_id), None)


@pytest.fixture(scope="session")
async def dev_temporal(dev_server: DevServer) -> Client:
    return await dev_client(dev_server)


@pytest.fixture
async def gate(dev_temporal: Client, pg_repo: Repository, tmp_path: Path
               ) -> AsyncIterator[Callable[..., Any]]:
    """`async with gate(**settings) as g:` a served parkgate (READ auto,
    WRITE/EXECUTE parked for a person)."""

    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[Gate]:
        sock = free_socket()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        async with api_rig(dev_temporal, pg_repo, tmp_path, base_url=url, **overrides) as api, \
                live_server(api.app, sock):
            yield Gate(api, url, home)

    yield make


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    """Poll `check` until it returns something truthy."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.1)
