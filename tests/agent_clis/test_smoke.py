"""Each real agent CLI runs one scripted tool call against its fake model, no gate.

What the harness promises the gate's tests: the pinned CLI installs, reaches the
fake on 127.0.0.1 with the config the helpers write, runs the tool the model
asked for, sends the result back (recorded by the fake) and finishes with the
model's text. Offline apart from the one-time npm install.

Wall time (load average 5-7 on two cores, the CLIs cached): Codex 1.3 s,
Gemini CLI 7 s, opencode 11-17 s; the first run adds the npm installs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.agent_clis import run_codex, run_gemini, run_opencode
from tests.fixtures.fake_models.chat_completions import FakeChatCompletions
from tests.fixtures.fake_models.gemini import FakeGemini
from tests.fixtures.fake_models.openai_responses import FakeResponses
from tests.fixtures.fake_models.script import Reply, ToolCall


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    workspace.mkdir()
    return home, workspace


async def test_codex_runs_a_shell_call(codex_cli: Path, tmp_path: Path) -> None:
    home, workspace = dirs(tmp_path)
    shell = ToolCall("exec_command", {"cmd": "printf from-codex > out.txt && cat out.txt"})
    fake = FakeResponses([shell, Reply("codex finished")])
    async with fake.running():
        run = await run_codex(codex_cli, fake, workspace, home)
    assert run.returncode == 0, run.describe()
    assert (workspace / "out.txt").read_text() == "from-codex"
    assert "from-codex" in fake.output_of(shell)
    messages = [e["item"].get("text") for e in run.events() if e.get("type") == "item.completed"
                and e["item"].get("type") == "agent_message"]
    assert messages == ["codex finished"], run.describe()


@pytest.mark.slow  # a node start-up of several seconds on a loaded machine
async def test_gemini_runs_a_file_write(gemini_cli: Path, tmp_path: Path) -> None:
    home, workspace = dirs(tmp_path)
    write = ToolCall("write_file", {"file_path": str(workspace / "out.txt"),
                                    "content": "from-gemini\n"})
    fake = FakeGemini([write, Reply("gemini finished")])
    async with fake.running():
        run = await run_gemini(gemini_cli, fake, workspace, home)
    assert run.returncode == 0, run.describe()
    assert (workspace / "out.txt").read_text() == "from-gemini\n"
    told = fake.output_of(write)
    assert "out.txt" in told, told
    assert "gemini finished" in run.stdout, run.describe()


@pytest.mark.slow  # opencode's first start in a new HOME: 6-17 s here
async def test_opencode_runs_a_shell_call(opencode_cli: Path, tmp_path: Path) -> None:
    home, workspace = dirs(tmp_path)
    shell = ToolCall("bash", {"command": "printf from-opencode > out.txt && cat out.txt",
                              "description": "write a file"})
    fake = FakeChatCompletions([shell, Reply("opencode finished")])
    async with fake.running():
        run = await run_opencode(opencode_cli, fake, workspace, home)
    assert run.returncode == 0, run.describe()
    assert (workspace / "out.txt").read_text() == "from-opencode"
    assert fake.output_of(shell).strip() == "from-opencode"
    tools = [e["part"] for e in run.events() if e.get("type") == "tool_use"]
    assert [(t["tool"], t["callID"], t["state"]["status"]) for t in tools] == [
        ("bash", shell.id, "completed")], run.describe()
    texts = [e["part"]["text"] for e in run.events() if e.get("type") == "text"]
    assert texts == ["opencode finished"], run.describe()
