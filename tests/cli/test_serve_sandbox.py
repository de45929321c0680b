"""Issue 28, the quick start as the attacker met it: `parkgate serve` as root
with its output in a log file, an editable install, and one shell call the
policy lets through. From inside that call: no Temporal frontend (not in
/proc/net/tcp, no TCP, no SDK client), no other workspace, no data directory
(ours or another's), no serve log with the printed API keys, no write to
parkgate's code or virtualenv; the call's own workspace is writable. And serve
says loudly that it runs tools as root."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import httpx
import pytest

import parkgate
from parkgate.runtime.ports import free_port
from tests.cli.test_serve import Serve
from tests.dispatcher.test_sandbox_reach import TEMPORAL_PROBE
from tests.fixtures.required import needs_net_sandbox

pytestmark = [
    pytest.mark.devserver,
    pytest.mark.timeout(300),
    needs_net_sandbox,
]


def _section(text: str, name: str) -> str:
    return text.split(f"=={name}==\n", 1)[1].split("==", 1)[0]


@pytest.mark.slow
def test_an_approved_shell_call_in_the_quick_start_reaches_nothing_of_parkgate(
    tmp_path: Path,
) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    mine, theirs = work / "a", work / "b"
    for ws in (mine, theirs):
        ws.mkdir(parents=True)
    (theirs / "notes.txt").write_text("notes-of-another-session")
    other_data = home / ".parkgate"  # the user's default data dir: another instance
    other_data.mkdir(parents=True, mode=0o700)
    (other_data / "link-secret").write_text("link-secret-of-another-instance")
    (mine / "probe.py").write_text(TEMPORAL_PROBE)
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    env.update(
        HOME=str(home),
        PARKGATE_DATA_DIR=str(data),
        PARKGATE_WORKSPACE_ROOTS=json.dumps([str(work)]),
        PARKGATE_TOOL_CONFIRMATION=json.dumps({"per_tool": {"shell": "auto"}}),
        PYTHONUNBUFFERED="1",
        COLUMNS="200",
    )
    package = Path(os.path.realpath(Path(parkgate.__path__[0]) / "__init__.py")).parent
    planted = [package / "planted_by_tool.py", Path(sys.prefix) / "planted_by_tool"]
    log = tmp_path / "serve.log"
    serve = Serve(env, free_port(), log)
    try:
        urls = serve.wait_ready()
        banner = serve.text()
        temporal = re.search(r"Temporal\s+(\d+\.\d+\.\d+\.\d+:\d+)", banner)
        assert temporal is not None, banner
        if os.geteuid() == 0:
            assert "runs tools as ROOT" in banner, banner
        command = "; ".join([
            "echo ==listening==; awk 'NR > 1 && $4 == \"0A\"' /proc/net/tcp /proc/net/tcp6",
            f"echo ==temporal==; {sys.executable} probe.py {temporal.group(1)}",
            f"echo ==roots==; ls -A {work}",
            f"echo ==reads==; cat {theirs}/notes.txt {data}/link-secret "
            f"{other_data}/link-secret {log}",
            "echo ==writes==; " + "; ".join(f"echo x > {p}" for p in planted),
            "echo ==mine==; echo mine > mine.txt && cat mine.txt",
            "echo ==end==",
        ])
        headers = {"Authorization": f"Bearer {urls['key']}"}
        with httpx.Client(base_url=urls["api"], headers=headers, timeout=60) as api:
            reg = api.post("/v1/sessions", json={"session_id": "s1", "workspace_path": str(mine)})
            assert reg.status_code in (200, 201), reg.text
            sub = api.post("/v1/sessions/s1/turns/t1/tool-calls", params={"wait": 50},
                           json={"id": "hostile", "name": "shell", "input": {"command": command}})
            assert sub.status_code in (200, 202), sub.text
            deadline = time.monotonic() + 60
            call = sub.json()
            while call["status"] not in ("succeeded", "failed") and time.monotonic() < deadline:
                call = api.get("/v1/sessions/s1/tool-calls/hostile", params={"wait": 20}).json()
        assert call["status"] in ("succeeded", "failed"), call
        out = call["result"]["content"][0]["text"]
        stdout = out.split("--- stderr ---", 1)[0]
        assert "==end==" in stdout, out
        assert _section(stdout, "listening").strip() == ""  # no host socket in sight
        reach = _section(stdout, "temporal")
        assert "listed False" in reach and "tcp failed" in reach and "sdk failed" in reach
        assert _section(stdout, "roots") == "a\n"
        for secret in ("notes-of-another-session", "link-secret-of-another-instance",
                       urls["key"], "PARKGATE_API_KEY", "PARKGATE_APPROVER_KEY"):
            assert secret not in out, secret
        assert (data / "link-secret").read_text() not in out
        assert out.count("Read-only file system") >= len(planted), out
        assert _section(stdout, "mine") == "mine\n"
        assert (mine / "mine.txt").read_text() == "mine\n"
    finally:
        found = [p for p in planted if p.exists()]
        for path in found:
            path.unlink()
        serve.kill()
    assert found == []
