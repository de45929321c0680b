"""A served parkgate for the real agent CLIs, and the inbox's side of a test:
find the call the agent's hook parked, decide it, read what was recorded."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.calls.records import CallStatus
from parkgate.models import utcnow
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters, CallRecord
from tests.api.rig import ApiRig, api_rig, free_socket, live_server
from tests.claude_code.conftest import PARKGATE

#: Shell reads run at once; everything else of class EXECUTE or WRITE parks.
POLICY = {"rules": [{"tool": "Bash", "command_pattern": "cat .*", "mode": "auto"}]}


@dataclass
class Served:
    api: ApiRig
    url: str
    home: Path
    workspace: Path
    since: datetime

    def install(self, agent: str, *extra: str, env: dict[str, str] | None = None) -> None:
        """`parkgate <agent> install` as a user runs it, into this test's HOME."""
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("PARKGATE_", "CODEX_"))}
        full.update({"HOME": str(self.home), "PARKGATE_DATA_DIR": str(self.home / "pg"),
                     f"PARKGATE_{agent.upper()}_WAIT_SECONDS": "60", **(env or {})})
        done = subprocess.run([str(PARKGATE), agent, "install", "--url", self.url, *extra],
                              capture_output=True, text=True, env=full, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    async def parked(self, timeout: float = 60) -> CallRecord:
        """The one call of this workspace's sessions waiting for a person."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            page = await self.api.repo.list_calls(
                CallFilters(status=CallStatus.PARKED, since=self.since), limit=50)
            for call in page.items:
                session = await self.api.repo.get_session(call.session_id)
                if session is not None and session.workspace_path == str(self.workspace):
                    return call
            assert asyncio.get_running_loop().time() < deadline, "nothing parked"
            await asyncio.sleep(0.1)

    async def decide(self, call: CallRecord, body: dict[str, Any]) -> None:
        parked = await self.api.wait_parked(call.session_id, call.tool_use_id)
        r = await self.api.http.post(
            f"/v1/sessions/{call.session_id}/turns/{call.turn_id}/confirmations/"
            f"{parked['request_id']}", json=body)
        assert r.status_code == 200, r.text

    async def calls(self) -> list[CallRecord]:
        """Every call of this workspace's sessions, oldest first."""
        page = await self.api.repo.list_calls(CallFilters(since=self.since), limit=100)
        mine = []
        for call in page.items:
            session = await self.api.repo.get_session(call.session_id)
            if session is not None and session.workspace_path == str(self.workspace):
                mine.append(call)
        return list(reversed(mine))

    async def settled(self, timeout: float = 30) -> list[CallRecord]:
        """This workspace's calls once none is claimed any more (outcomes filed)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            calls = await self.calls()
            if calls and all(c.status != CallStatus.CLAIMED for c in calls):
                return calls
            assert asyncio.get_running_loop().time() < deadline, [
                (c.tool_name, c.status) for c in calls]
            await asyncio.sleep(0.1)


@asynccontextmanager
async def served(client: Client, repo: Repository, tmp_path: Path,
                 **settings: Any) -> AsyncIterator[Served]:
    sock = free_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    home = tmp_path / "home"
    home.mkdir()
    async with api_rig(client, repo, tmp_path, base_url=url, policy=POLICY,
                       **settings) as api, live_server(api.app, sock):
        yield Served(api, url, home, api.workspace, utcnow())
