"""`parkgate hook claude-code` as Claude Code runs it (a subprocess per event):
everything that is not a decision blocks a PreToolUse with exit 2, the reason
on stderr and the `deny` JSON on stdout; the reason names the cause."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.agent_client import AsyncParkgateClient
from parkgate.store.repository import Repository
from tests.agent_client.test_gate import parked, stack
from tests.api.rig import ApiRig, closed_port_url, free_socket, live_server
from tests.claude_code.conftest import PARKGATE


@dataclass
class Hooked:
    code: int
    stdout: str
    stderr: str

    def denied(self) -> str:
        """The deny on stdout (exit 2): its reason."""
        assert self.code == 2, (self.code, self.stdout, self.stderr)
        out = json.loads(self.stdout)["hookSpecificOutput"]
        assert out["permissionDecision"] == "deny", out
        assert out["permissionDecisionReason"].strip() in self.stderr, self.stderr
        return str(out["permissionDecisionReason"])


async def hook(stdin: bytes, url: str, *extra: str, key: str | None = "some-key",
               home: Path) -> Hooked:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env["PARKGATE_DATA_DIR"] = str(home)
    if key is not None:
        env["PARKGATE_API_KEY"] = key
    proc = await asyncio.create_subprocess_exec(
        str(PARKGATE), "hook", "claude-code", "--url", url, *extra, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    return Hooked(proc.returncode or 0, out.decode(), err.decode())


def pre_event(workspace: Path, **fields: Any) -> bytes:
    return json.dumps({"hook_event_name": "PreToolUse", "session_id": str(uuid.uuid4()),
                       "cwd": str(workspace), "tool_name": "Read",
                       "tool_input": {"file_path": str(workspace / "a.txt")},
                       "tool_use_id": f"toolu_{uuid.uuid4().hex[:12]}", **fields}).encode()


@contextmanager
def scripted(status: int, body: bytes, delay: float = 0.0) -> Iterator[str]:
    """An HTTP server that answers every POST with `status` and `body` (what a
    wrong `--url`, a proxy or a broken deployment answers)."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            # A client that gave up (the hook's own deadline) before a slow
            # answer: expected, and never a traceback on another test's stderr.
            pass

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def served(api_pg: ApiRig) -> AsyncIterator[tuple[ApiRig, str]]:
    sock = free_socket()
    async with live_server(api_pg.app, sock):
        yield api_pg, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_what_is_not_a_decision_blocks_with_its_cause(tmp_path: Path) -> None:
    ws = tmp_path
    unreachable = closed_port_url().removesuffix("/hook")
    with scripted(200, b"{}") as empty, scripted(200, b"null") as null, \
            scripted(200, b'{"hookSpecificOutput": {"permissionDecision": "maybe"}}') as odd, \
            scripted(500, b'{"error": {"code": "internal", "message": "boom"}}') as broken, \
            scripted(200, b"{}", delay=5) as slow:
        runs = await asyncio.gather(
            hook(b"", empty, home=tmp_path),
            hook(b"not json", empty, home=tmp_path),
            hook(pre_event(ws), empty, home=tmp_path),
            hook(pre_event(ws), null, home=tmp_path),
            hook(pre_event(ws), odd, home=tmp_path),
            hook(pre_event(ws), broken, home=tmp_path),
            hook(pre_event(ws), slow, "--timeout", "1", home=tmp_path),
            hook(pre_event(ws), unreachable, home=tmp_path),
            hook(pre_event(ws), empty, key=None, home=tmp_path),
        )
    reasons = [r.denied() for r in runs]
    assert "stdin is empty" in reasons[0]
    assert "stdin is not JSON" in reasons[1]
    assert "not a PreToolUse decision: {}" in reasons[2]
    assert "not a PreToolUse decision: null" in reasons[3]
    assert "not a PreToolUse decision" in reasons[4]
    assert "HTTP 500: boom" in reasons[5]
    assert "did not answer within 1 s" in reasons[6]
    assert "could not be reached" in reasons[7]
    assert "PARKGATE_API_KEY is not set" in reasons[8]


async def test_refusals_name_the_key_or_the_event(served: tuple[ApiRig, str],
                                                  tmp_path: Path) -> None:
    api, url = served
    bad_key, bad_event, post, fail_open = await asyncio.gather(
        hook(pre_event(api.workspace), url, key="pg_not_a_key", home=tmp_path),
        hook(pre_event(api.workspace, session_id="no spaces allowed"), url, key=api.key,
             home=tmp_path),
        # A post event never blocks (the tool ran): a non-blocking notice.
        hook(json.dumps({"hook_event_name": "PostToolUse", "session_id": "s"}).encode(), url,
             key="pg_not_a_key", home=tmp_path),
        hook(pre_event(api.workspace), url, "--fail-open", key="pg_not_a_key", home=tmp_path),
    )
    assert "refused the agent key" in bad_key.denied() and "HTTP 401" in bad_key.stderr
    assert "refused the hook event (HTTP 422" in bad_event.denied()
    assert post.code == 1 and post.stdout == "" and "HTTP 401" in post.stderr
    assert fail_open.code == 0 and fail_open.stdout == "" and "let through" in fail_open.stderr


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_a_closed_stdin_or_stdout_still_blocks(agent: str, tmp_path: Path) -> None:
    """Started with stdin closed (Python gives no stream), or with stdout
    closed, the hook still exits 2 (a traceback's exit 1 would let the call
    through), the reason on whatever stream is left."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env["PARKGATE_API_KEY"] = "some-key"
    argv = [str(PARKGATE), "hook", agent, "--url", closed_port_url().removesuffix("/hook")]
    no_stdin = subprocess.run(argv, capture_output=True, env=env, timeout=60,
                              preexec_fn=lambda: os.close(0))
    assert no_stdin.returncode == 2, no_stdin.stderr[-2000:]
    assert b"could not be read from stdin (stdin is closed)" in no_stdin.stderr
    assert b"Traceback" not in no_stdin.stderr
    if agent == "claude-code":
        out = json.loads(no_stdin.stdout)["hookSpecificOutput"]
        assert out["permissionDecision"] == "deny", out
    no_stdout = subprocess.run(argv, input=pre_event(tmp_path), capture_output=True,
                               env=env, timeout=60,
                               preexec_fn=lambda: os.close(1))
    assert no_stdout.returncode == 2, no_stdout.stderr[-2000:]
    assert b"Traceback" not in no_stdout.stderr and b"blocked" in no_stdout.stderr


def test_the_hook_process_skips_the_cli_imports(tmp_path: Path) -> None:
    """A hook process starts per tool call: with the options `install` writes
    it loads neither typer, httpx, pydantic nor the settings (about a second
    on a loaded machine)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env["PARKGATE_API_KEY"] = "some-key"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from parkgate.cli import main; main()",
         "hook", "claude-code", "--url", closed_port_url().removesuffix("/hook"),
         "--timeout", "5"],
        input=pre_event(tmp_path), capture_output=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert b"could not be reached" in proc.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()
              if line.startswith("import time:")}
    assert "parkgate.cli.hook_run" in loaded
    heavy = loaded & {"typer", "httpx", "pydantic", "parkgate.settings", "parkgate.cli.root"}
    assert not heavy, heavy


async def test_a_parked_call_says_so_once_on_stderr_and_stdout_stays_the_decision(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """A hook holding a parked call prints one line naming the request and the
    inbox (never the signed link) while it waits; a line when it goes on."""
    async with stack(dev_temporal, sqlite_repo, tmp_path, claude_code_wait_seconds=60) \
            as (api, base), AsyncParkgateClient(base, api.human_key) as human:
        session, tid = str(uuid.uuid4()), f"toolu_{uuid.uuid4().hex[:12]}"
        event = {"hook_event_name": "PreToolUse", "session_id": session,
                 "cwd": str(api.workspace), "tool_name": "Write", "tool_use_id": tid,
                 "tool_input": {"file_path": str(api.workspace / "n.txt"), "content": "x"}}
        proc = await asyncio.create_subprocess_exec(
            str(PARKGATE), "hook", "claude-code", "--url", base, "--timeout", "120",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, "PARKGATE_API_KEY": api.key})
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(event).encode())
        await proc.stdin.drain()
        proc.stdin.close()
        await parked(human, session, tid)
        request_id = (await human.get_call(session, tid)).request_id
        # Said while it waits (before anyone decides), not only at the end.
        first = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert "parked" in first and tid in first and "Write" in first, first
        assert f"request {request_id}" in first and f"{base}/inbox" in first, first
        assert "/approve/" not in first
        await human.decide(session, tid, "allow")
        out, rest = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, rest
    answer = json.loads(out)  # stdout: the decision JSON and nothing else
    assert answer["hookSpecificOutput"]["permissionDecision"] == "allow"
    lines = (first + rest.decode()).splitlines()
    assert sum("is parked" in line for line in lines) == 1, lines
    assert sum("resumed: allow" in line for line in lines) == 1, lines
