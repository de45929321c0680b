"""Issue 40 (7): examples/own_tool_agent.py as a user runs it, against a real
`parkgate serve`: it parks, is SIGKILLed while parked, is started again (the
same conversation: the same tool call id), the call is approved with
`parkgate approve`, and the agent's own function runs exactly once with its
outcome recorded."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from parkgate.runtime.ports import free_port
from tests.cli.conftest import parkgate_argv
from tests.fixtures.serve import Serve, serve_environment

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(300)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_tool_agent.py"
SESSION, CALL = "own-tool-demo", "conv-1-note-1"
NOTE = "ship the release on Friday"


def _until(what: str, look: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if look():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} did not happen within {seconds}s")


def _parked_line(log: Path) -> bool:
    text = log.read_text(errors="replace") if log.exists() else ""
    return f"append_note call {CALL} is parked for approval" in text


def test_the_own_tool_example_survives_sigkill_while_parked_and_runs_once(
    tmp_path: Path,
) -> None:
    env = serve_environment(tmp_path)
    work = tmp_path / "work"
    serve = Serve(env, free_port(), tmp_path / "serve.log")
    agents: list[subprocess.Popen[bytes]] = []
    try:
        urls = serve.wait_ready()
        api, key = urls["api"], urls["key"]
        agent_env = {**env, "PARKGATE_API_URL": api, "PARKGATE_API_KEY": key}
        http = httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"},
                            timeout=10)

        def start(n: int) -> tuple[subprocess.Popen[bytes], Path, Path]:
            out, err = tmp_path / f"agent-{n}.out", tmp_path / f"agent-{n}.err"
            proc = subprocess.Popen([sys.executable, str(EXAMPLE)], cwd=work, env=agent_env,
                                    stdout=out.open("wb"), stderr=err.open("wb"),
                                    stdin=subprocess.DEVNULL)
            agents.append(proc)
            return proc, out, err

        def call() -> dict[str, object]:
            r = http.get(f"/v1/sessions/{SESSION}/tool-calls/{CALL}")
            return r.json() if r.status_code < 300 else {}

        first, _, first_err = start(1)
        _until("the first agent's parked line", lambda: _parked_line(first_err))
        parked = call()
        assert parked["status"] == "parked" and first.poll() is None
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
        assert not (work / "notes.txt").exists()  # parked: never ran

        second, second_out, second_err = start(2)
        _until("the restarted agent attaching", lambda: _parked_line(second_err))
        assert second.poll() is None  # waiting on the same call
        approved = subprocess.run(
            [*parkgate_argv(), "approve", str(parked["request_id"]), "--reason", "go"],
            env=env, capture_output=True, text=True, timeout=60)
        assert approved.returncode == 0, approved.stderr
        assert second.wait(timeout=120) == 0, second_err.read_text()

        told = second_out.read_text()
        assert f"done: appended {len(NOTE)} characters to notes.txt" in told, told
        assert (work / "notes.txt").read_text() == NOTE + "\n"  # ran exactly once
        done = call()
        assert done["status"] == "succeeded" and done["tool_name"] == "append_note"
        events = http.get(f"/v1/sessions/{SESSION}/tool-calls/{CALL}/events").json()["events"]
        types = [e["type"] for e in events]
        # One release, one started claim (the restarted agent's), one outcome.
        assert types.count("tool.released") == 1, types
        assert types.count("tool.claim_started") == 1, types
        assert types.count("tool.outcome_reported") == 1, types
        http.close()
        assert serve.interrupt() == 0, serve.text()
    finally:
        for proc in agents:
            if proc.poll() is None:
                proc.kill()
        if serve.proc.poll() is None:
            serve.kill()
