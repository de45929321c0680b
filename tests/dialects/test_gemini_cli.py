"""The real Gemini CLI (`gemini -p`) behind parkgate, offline: the scripted fake
Gemini API asks for the tool calls; `parkgate gemini install` merged the hooks
into the settings.json the harness wrote. Gemini sends no call ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.calls.records import CallStatus
from parkgate.store.repository import Repository
from tests.dialects.real_cli import Served, served
from tests.fixtures.agent_clis import CliRun, gemini_home, run_gemini
from tests.fixtures.fake_models.gemini import FakeGemini
from tests.fixtures.fake_models.script import Reply, ToolCall

pytestmark = pytest.mark.slow


def install(s: Served) -> None:
    gemini_home(s.home)
    s.install("gemini")


async def gemini(s: Served, cli: Path, fake: FakeGemini) -> CliRun:
    install(s)
    return await run_gemini(cli, fake, s.workspace, s.home,
                            env={"PARKGATE_API_KEY": s.api.key})


async def test_a_read_runs_a_write_parks_and_runs_once_approved(
        gemini_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, gemini_wait_seconds=60) as s:
        (s.workspace / "a.txt").write_text("from-disk\n")
        read = ToolCall("read_file", {"file_path": str(s.workspace / "a.txt")})
        write = ToolCall("write_file", {"file_path": str(s.workspace / "made.txt"),
                                        "content": "made\n"})
        fake = FakeGemini([read, write, Reply("gemini finished")])
        async with fake.running():
            run = asyncio.create_task(gemini(s, gemini_cli, fake))
            parked = await s.parked()
            assert parked.tool_name == "gemini-write_file"
            assert not (s.workspace / "made.txt").exists()
            await s.decide(parked, {"decision": "allow"})
            done = await run
        assert done.returncode == 0, done.describe()
        assert "from-disk" in fake.output_of(read)
        assert (s.workspace / "made.txt").read_text() == "made\n"
        calls = await s.settled()
        assert [(c.tool_name, c.status) for c in calls] == [
            ("gemini-read_file", CallStatus.SUCCEEDED),
            ("gemini-write_file", CallStatus.SUCCEEDED)]


async def test_a_denial_never_runs_and_the_model_reads_why(
        gemini_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, gemini_wait_seconds=60) as s:
        shell = ToolCall("run_shell_command", {"command": "printf no > denied.txt"})
        fake = FakeGemini([shell, Reply("gemini finished")])
        async with fake.running():
            run = asyncio.create_task(gemini(s, gemini_cli, fake))
            await s.decide(await s.parked(), {"decision": "deny",
                                              "reason": "not in the release freeze"})
            await run
        assert not (s.workspace / "denied.txt").exists()
        assert "not in the release freeze" in fake.output_of(shell)


async def test_parkgate_stopped_blocks_the_call(
        gemini_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    shell = ToolCall("run_shell_command", {"command": "printf x > blocked.txt"})
    fake = FakeGemini([shell, Reply("gemini finished")])
    async with fake.running():
        async with served(dev_temporal, pg_repo, tmp_path) as s:
            install(s)
        await run_gemini(gemini_cli, fake, s.workspace, s.home,
                         env={"PARKGATE_API_KEY": s.api.key})
    assert not (s.workspace / "blocked.txt").exists()
    assert "could not be reached" in fake.output_of(shell)
