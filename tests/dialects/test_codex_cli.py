"""The real Codex (`codex exec`) behind parkgate, offline: the scripted fake
Responses API asks for the tool calls; `parkgate codex install` put the hooks
in place and had Codex trust them (no bypass flag)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.calls.records import CallStatus
from parkgate.store.repository import Repository
from tests.dialects.real_cli import Served, served
from tests.fixtures.agent_clis import CliRun, codex_home, run_codex
from tests.fixtures.fake_models.openai_responses import FakeResponses
from tests.fixtures.fake_models.script import Reply, ToolCall

pytestmark = pytest.mark.slow


def install(s: Served, cli: Path, fake: FakeResponses) -> None:
    codex_home(s.home, fake)
    s.install("codex", env={"CODEX_HOME": str(s.home / ".codex"),
                            "PATH": f"{cli.parent}:{os.environ['PATH']}"})


async def codex(s: Served, cli: Path, fake: FakeResponses) -> CliRun:
    install(s, cli, fake)
    return await run_codex(cli, fake, s.workspace, s.home,
                           env={"PARKGATE_API_KEY": s.api.key})


async def test_a_read_runs_a_write_parks_and_runs_once_approved(
        codex_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, codex_wait_seconds=60) as s:
        (s.workspace / "a.txt").write_text("from-disk")
        read = ToolCall("exec_command", {"cmd": "cat a.txt"})
        write = ToolCall("exec_command", {"cmd": "printf made > made.txt"})
        fake = FakeResponses([read, write, Reply("codex finished")])
        async with fake.running():
            run = asyncio.create_task(codex(s, codex_cli, fake))
            parked = await s.parked()
            assert parked.tool_name == "Bash" and not (s.workspace / "made.txt").exists()
            await s.decide(parked, {"decision": "allow"})
            done = await run
        assert "from-disk" in fake.output_of(read), done
        assert (s.workspace / "made.txt").read_text() == "made"
        calls = await s.settled()
        assert [(c.tool_name, c.status) for c in calls] == [
            ("Bash", CallStatus.SUCCEEDED), ("Bash", CallStatus.SUCCEEDED)]


async def test_an_approvers_edit_is_what_runs(
        codex_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, codex_wait_seconds=60) as s:
        write = ToolCall("exec_command", {"cmd": "printf v1 > app.txt"})
        fake = FakeResponses([write, Reply("codex finished")])
        async with fake.running():
            run = asyncio.create_task(codex(s, codex_cli, fake))
            await s.decide(await s.parked(), {"decision": "allow_with_edits", "edited_input":
                                              {"command": "printf v2 > app.txt"}})
            await run
        assert (s.workspace / "app.txt").read_text() == "v2"
        assert [c.status for c in await s.settled()] == [CallStatus.SUCCEEDED]


async def test_a_denial_never_runs_and_the_model_reads_why(
        codex_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, codex_wait_seconds=60) as s:
        write = ToolCall("exec_command", {"cmd": "printf no > denied.txt"})
        fake = FakeResponses([write, Reply("codex finished")])
        async with fake.running():
            run = asyncio.create_task(codex(s, codex_cli, fake))
            await s.decide(await s.parked(), {"decision": "deny",
                                              "reason": "not in the release freeze"})
            await run
        assert not (s.workspace / "denied.txt").exists()
        assert "not in the release freeze" in fake.output_of(write)


async def test_parkgate_stopped_blocks_the_call(
        codex_cli: Path, dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    write = ToolCall("exec_command", {"cmd": "printf x > blocked.txt"})
    fake = FakeResponses([write, Reply("codex finished")])
    async with fake.running():
        async with served(dev_temporal, pg_repo, tmp_path) as s:
            install(s, codex_cli, fake)
        # parkgate is gone; the installed, trusted hooks still point at it.
        await run_codex(codex_cli, fake, s.workspace, s.home,
                        env={"PARKGATE_API_KEY": s.api.key})
    assert not (s.workspace / "blocked.txt").exists()
    assert "could not be reached" in fake.output_of(write)
