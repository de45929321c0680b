"""The real Claude Code CLI (bundled in the claude-agent-sdk wheel) against a
scripted fake Messages API and a real parkgate stack (API served on a socket,
worker, Temporal dev server, Postgres). Offline: no account, no network."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.runtime.devserver import DevServer
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server
from tests.claude_code.fake_anthropic import FakeAnthropic, Step
from tests.fixtures.required import unavailable
from tests.fixtures.temporal import dev_client


def _bundled_cli() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


CLI = _bundled_cli()

PARKGATE = Path(sys.executable).parent / "parkgate"


@dataclass
class ClaudeRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        return dict(json.loads(self.stdout))


@dataclass
class Stack:
    """parkgate on a real socket, and a way to run Claude Code against it."""

    api: ApiRig
    url: str
    home: Path

    def settings_json(self, wait_seconds: float, *extra: str) -> str:
        return settings_json(self.url, self.home, wait_seconds, *extra)

    async def claude(self, fake: FakeAnthropic, session_id: str, *, wait_seconds: float = 30,
                     prompt: str = "do the task", install: tuple[str, ...] = (),
                     timeout: float = 180, resume: bool = False) -> ClaudeRun:
        return await run_claude(fake, session_id, url=self.url, key=self.api.key,
                                workspace=self.api.workspace, home=self.home,
                                wait_seconds=wait_seconds, prompt=prompt, install=install,
                                timeout=timeout, resume=resume)


def settings_json(url: str, home: Path, wait_seconds: float, *extra: str) -> str:
    """What `parkgate claude-code install --print` writes."""
    env = {**os.environ, "PARKGATE_CLAUDE_CODE_WAIT_SECONDS": str(wait_seconds),
           "PARKGATE_DATA_DIR": str(home / "pg")}
    out = subprocess.run([str(PARKGATE), "claude-code", "install", "--print", "--url", url,
                          *extra], env=env, capture_output=True, text=True, check=True)
    return out.stdout


async def run_claude(fake: FakeAnthropic, session_id: str, *, url: str, key: str,
                     workspace: Path, home: Path, wait_seconds: float = 30,
                     prompt: str = "do the task", install: tuple[str, ...] = (),
                     timeout: float = 180, resume: bool = False) -> ClaudeRun:
    """`claude -p` in `workspace`, its hooks from `install --print` (offline)."""
    assert CLI is not None
    env = {"PATH": f"{PARKGATE.parent}{os.pathsep}{os.environ['PATH']}",
           "HOME": str(home), "PARKGATE_DATA_DIR": str(home / "pg"),
           "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
           "PARKGATE_API_KEY": key}
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "-p", prompt, "--resume" if resume else "--session-id", session_id,
        "--output-format", "json", "--settings", settings_json(url, home, wait_seconds, *install),
        cwd=str(workspace), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return ClaudeRun(proc.returncode or 0, out.decode(), err.decode())


@pytest.fixture(scope="session")
async def dev_temporal(dev_server: DevServer) -> Client:
    return await dev_client(dev_server)


@pytest.fixture
async def api_pg(dev_temporal: Client, pg_repo: Repository, tmp_path: Path
                 ) -> AsyncIterator[ApiRig]:
    """The app on Postgres, not served (hook requests over ASGI)."""
    async with api_rig(dev_temporal, pg_repo, tmp_path) as rig:
        yield rig


@pytest.fixture
async def stack(dev_temporal: Client, pg_repo: Repository, tmp_path: Path
                ) -> AsyncIterator[Callable[..., Any]]:
    """`async with stack(policy=..., **settings) as s:` a served parkgate."""
    if CLI is None:
        unavailable("claude-agent-sdk (the bundled Claude Code CLI) is not installed")

    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[Stack]:
        sock = free_socket()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        async with api_rig(dev_temporal, pg_repo, tmp_path, base_url=url, **overrides) as api, \
                live_server(api.app, sock):
            yield Stack(api, url, home)

    yield make


def new_session() -> str:
    return str(uuid.uuid4())


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 60) -> Any:
    """Poll `check` until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.1)


__all__ = ["FakeAnthropic", "Stack", "Step", "new_session", "until"]
