"""The real opencode CLI behind parkgate: `parkgate opencode install` writes its
plugin into the project, opencode runs against a scripted fake model and a
served parkgate (READ auto, WRITE/EXECUTE parked for a person). Offline."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent_clis.conftest import Gate, until
from tests.api.rig import closed_port_url
from tests.claude_code.test_cli import decide, parked
from tests.fixtures.agent_clis import CliRun, run_opencode, write_opencode_config
from tests.fixtures.fake_models.chat_completions import FakeChatCompletions
from tests.fixtures.fake_models.script import Reply, ToolCall

PARKGATE = Path(sys.executable).parent / "parkgate"
pytestmark = pytest.mark.slow  # opencode starts in 6-17 s here


def install(g: Gate, workspace: Path, fake: FakeChatCompletions, url: str) -> None:
    """The fake's provider in opencode.json, then parkgate's install over it."""
    write_opencode_config(workspace, fake)
    env = {**os.environ, "PARKGATE_DATA_DIR": str(g.home / "pg"),
           "PARKGATE_OPENCODE_WAIT_SECONDS": "60"}
    subprocess.run([str(PARKGATE), "opencode", "install", "--project", str(workspace),
                    "--url", url], env=env, check=True, capture_output=True, text=True)
    config = json.loads((workspace / "opencode.json").read_text())
    assert config["provider"]["fake"]["options"]["baseURL"] == fake.base_url  # kept
    assert config["permission"]["bash"] == "allow"
    assert (workspace / ".opencode" / "plugin" / "parkgate.js").is_file()


async def opencode(g: Gate, cli: Path, fake: FakeChatCompletions, url: str | None = None,
                   ) -> CliRun:
    workspace = g.api.workspace
    install(g, workspace, fake, url or g.url)
    return await run_opencode(cli, fake, workspace, g.home,
                              env={"PARKGATE_API_KEY": g.api.key}, timeout=150)


def tool_events(run: CliRun, call: ToolCall) -> list[dict[str, Any]]:
    return [e["part"] for e in run.events()
            if e.get("type") == "tool_use" and e["part"].get("callID") == call.id]


async def parked_call(g: Gate, call: ToolCall) -> tuple[str, dict[str, Any]]:
    row = await until(lambda: g.call(call.id))
    return row.session_id, await parked(g, row.session_id, call.id)


async def test_read_runs_at_once_then_a_write_parks_and_runs_once_approved(
        gate: Any, opencode_cli: Path) -> None:
    """One opencode run (its start is the slow part): a read, then a write."""
    async with gate(opencode_wait_seconds=60) as g:
        notes = g.api.workspace / "notes.txt"
        notes.write_text("the notes say hello\n")
        target = g.api.workspace / "plan.txt"
        read = ToolCall("read", {"filePath": str(notes)})
        write = ToolCall("write", {"filePath": str(target), "content": "approved line\n"})
        fake = FakeChatCompletions([read, write, Reply("wrote it")])
        async with fake.running():
            run_task = asyncio.create_task(opencode(g, opencode_cli, fake))
            sid, call = await parked_call(g, write)
            # The read ran at once, before anyone decided anything, its outcome filed.
            assert "the notes say hello" in fake.output_of(read)
            done_read = await until(lambda: _finished(g, read.id))
            assert done_read.tool_name == "read" and done_read.session_id == sid
            assert done_read.status.value == "succeeded", done_read
            assert "the notes say hello" in done_read.result.text
            assert not target.exists()  # the write does not run while parked
            approval = await g.api.repo.get_approval(call["request_id"])
            assert approval is not None and "+approved line" in (approval.info.get("diff") or "")
            await decide(g, sid, call, {"decision": "allow", "decided_by": "alice"})
            run = await run_task
        assert run.returncode == 0, run.describe()
        assert target.read_text() == "approved line\n"
        assert [t["state"]["status"] for t in tool_events(run, write)] == ["completed"]
        done = await until(lambda: _finished(g, write.id))
        assert done.status.value == "succeeded", done
        assert sid.startswith("ses_")  # opencode's own session id is the session


async def _finished(g: Gate, call_id: str) -> Any:
    row = await g.call(call_id)
    return row if row is not None and row.result is not None else None


async def test_a_denial_never_runs_and_an_approvers_edit_is_what_runs(
        gate: Any, opencode_cli: Path) -> None:
    """One opencode run: a shell call denied (the model reads why), then a
    write approved with an edit (the edited input is what opencode runs)."""
    async with gate(opencode_wait_seconds=60) as g:
        shell = ToolCall("bash", {"command": "touch denied.txt", "description": "touch"})
        target = g.api.workspace / "app.txt"
        write = ToolCall("write", {"filePath": str(target), "content": "version 1\n"})
        fake = FakeChatCompletions([shell, write, Reply("done")])
        async with fake.running():
            run_task = asyncio.create_task(opencode(g, opencode_cli, fake))
            sid, call = await parked_call(g, shell)
            await decide(g, sid, call, {"decision": "deny", "reason": "not on a Friday"})
            sid, call = await parked_call(g, write)
            assert "not on a Friday" in fake.output_of(shell)
            await decide(g, sid, call, {"decision": "allow_with_edits", "edited_input": {
                "filePath": str(target), "content": "version 2\n"}})
            run = await run_task
        assert run.returncode == 0, run.describe()
        assert not (g.api.workspace / "denied.txt").exists()
        assert (await g.call(shell.id)).status.value == "denied"  # type: ignore[union-attr]
        assert target.read_text() == "version 2\n"
        assert [t["state"]["status"] for t in tool_events(run, write)] == ["completed"]
        done = await until(lambda: _finished(g, write.id))
        assert done.status.value == "succeeded", done


async def test_parkgate_stopped_or_garbled_blocks_the_call(gate: Any,
                                                           opencode_cli: Path) -> None:
    """The plugin fails closed: nothing listening at the URL, or a server there
    that answers something other than an allow or a deny (the fake model's
    catch-all answers `{}`), blocks the call and tells the model why."""
    async with gate() as g:
        shell = ToolCall("bash", {"command": "touch ran.txt", "description": "touch"})
        fake = FakeChatCompletions([shell, Reply("blocked")])
        async with fake.running():
            stopped = closed_port_url().removesuffix("/hook")
            for url, why in ((stopped, "parkgate: could not reach"),
                             (fake.url, "neither allow nor deny")):
                fake.results.clear()
                run = await opencode(g, opencode_cli, fake, url=url)
                assert not (g.api.workspace / "ran.txt").exists(), run.describe()
                told = fake.output_of(shell)
                assert why in told and "blocked" in told, told
