"""`parkgate hook codex|gemini` as the agents run it (a process per event): a
decision is printed as the agent's JSON; everything else blocks a pre-tool
event with exit 2 and the reason on stderr (stdout empty), naming the cause."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.api.rig import ApiRig, closed_port_url, free_socket, live_server
from tests.claude_code.conftest import PARKGATE
from tests.claude_code.test_command_hook import scripted


@dataclass
class Hooked:
    code: int
    stdout: str
    stderr: str

    def blocked(self) -> str:
        """A block: exit 2, nothing on stdout, the reason on stderr."""
        assert self.code == 2 and self.stdout == "", (self.code, self.stdout, self.stderr)
        assert "the call is blocked" in self.stderr
        return self.stderr


async def hook(agent: str, stdin: bytes, url: str, *extra: str, key: str | None = "some-key",
               home: Path) -> Hooked:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env["PARKGATE_DATA_DIR"] = str(home)
    if key is not None:
        env["PARKGATE_API_KEY"] = key
    proc = await asyncio.create_subprocess_exec(
        str(PARKGATE), "hook", agent, "--url", url, *extra, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return Hooked(proc.returncode or 0, out.decode(), err.decode())


def event(agent: str, workspace: Path, **fields: Any) -> bytes:
    sid = f"{agent}-{uuid.uuid4().hex[:8]}"
    if agent == "codex":
        body = {"hook_event_name": "PreToolUse", "session_id": sid, "cwd": str(workspace),
                "tool_name": "Bash", "tool_input": {"command": "ls"},
                "tool_use_id": f"call_{uuid.uuid4().hex[:8]}", "turn_id": "t1",
                "model": "m", "permission_mode": "default", "transcript_path": None}
    else:
        body = {"hook_event_name": "BeforeTool", "session_id": sid, "cwd": str(workspace),
                "tool_name": "read_file", "tool_input": {"file_path": "a.txt"},
                "transcript_path": "", "timestamp": "t"}
    return json.dumps({**body, **fields}).encode()


@pytest.fixture
async def served(api_pg: ApiRig) -> AsyncIterator[tuple[ApiRig, str]]:
    sock = free_socket()
    async with live_server(api_pg.app, sock):
        yield api_pg, f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("agent", ["codex", "gemini"])
async def test_what_is_not_a_decision_blocks_with_its_cause(agent: str, tmp_path: Path) -> None:
    ws = tmp_path
    unreachable = closed_port_url().removesuffix("/hook")
    ask = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask"}} \
        if agent == "codex" else {"decision": "ask"}
    empty_reason = {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                           "permissionDecision": "deny",
                                           "permissionDecisionReason": ""}} \
        if agent == "codex" else {"decision": "deny", "reason": ""}
    with scripted(200, b"null") as null, scripted(200, b"<html>") as html, \
            scripted(200, json.dumps(ask).encode()) as asking, \
            scripted(200, json.dumps(empty_reason).encode()) as silent, \
            scripted(503, b'{"error": {"code": "x", "message": "down"}}') as broken, \
            scripted(200, b"{}", delay=5) as slow:
        runs = await asyncio.gather(
            hook(agent, b"", null, home=tmp_path),
            hook(agent, event(agent, ws), null, home=tmp_path),
            hook(agent, event(agent, ws), html, home=tmp_path),
            hook(agent, event(agent, ws), asking, home=tmp_path),
            hook(agent, event(agent, ws), silent, home=tmp_path),
            hook(agent, event(agent, ws), broken, home=tmp_path),
            hook(agent, event(agent, ws), slow, "--timeout", "1", home=tmp_path),
            hook(agent, event(agent, ws), unreachable, home=tmp_path),
            hook(agent, event(agent, ws), null, key=None, home=tmp_path),
        )
    reasons = [r.blocked() for r in runs]
    assert "stdin is empty" in reasons[0]
    assert "decision: null" in reasons[1]
    assert "not JSON" in reasons[2]
    assert "decision" in reasons[3] and "decision" in reasons[4]
    assert "HTTP 503: down" in reasons[5]
    assert "did not answer within 1 s" in reasons[6]
    assert "could not be reached" in reasons[7]
    assert "PARKGATE_API_KEY is not set" in reasons[8]


async def test_decisions_pass_through_and_refusals_block(served: tuple[ApiRig, str],
                                                         tmp_path: Path) -> None:
    api, url = served
    (api.workspace / "a.txt").write_text("x")
    read = event("gemini", api.workspace)
    allowed, parked, bad_key, bad_event, post = await asyncio.gather(
        hook("gemini", read, url, key=api.key, home=tmp_path),
        hook("codex", event("codex", api.workspace, tool_input={"command": "make"}), url,
             key=api.key, home=tmp_path),
        hook("codex", event("codex", api.workspace), url, key="pg_not_a_key", home=tmp_path),
        hook("codex", event("codex", api.workspace, tool_use_id="a b"), url, key=api.key,
             home=tmp_path),
        hook("gemini", json.dumps({**json.loads(read), "hook_event_name": "AfterTool",
                                   "tool_response": {"llmContent": "x"}}).encode(), url,
             key="pg_not_a_key", home=tmp_path),
    )
    assert allowed.code == 0 and json.loads(allowed.stdout)["decision"] == "allow", allowed
    assert "parkgate_start" not in allowed.stdout  # the claim was started by the hook
    out = json.loads(parked.stdout)["hookSpecificOutput"]
    assert parked.code == 0 and out["permissionDecision"] == "deny", parked
    assert "waiting for a human approval" in out["permissionDecisionReason"]
    assert "refused the agent key" in bad_key.blocked()
    assert "refused the hook event (HTTP 422" in bad_event.blocked()
    assert post.code == 1 and post.stdout == "" and "HTTP 401" in post.stderr


def test_the_hook_process_skips_the_cli_imports(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env["PARKGATE_API_KEY"] = "some-key"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from parkgate.cli import main; main()",
         "hook", "codex", "--url", closed_port_url().removesuffix("/hook"), "--timeout", "5"],
        input=event("codex", tmp_path), capture_output=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()
              if line.startswith("import time:")}
    assert "parkgate.dialects.codex" in loaded
    heavy = loaded & {"typer", "httpx", "pydantic", "parkgate.settings", "parkgate.cli.root"}
    assert not heavy, heavy
