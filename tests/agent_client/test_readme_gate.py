"""The README's "Gate your own tools" snippet runs as written against a running
stack (real API on a socket, worker, Temporal dev server): it parks, a human
approves, and it prints what its comment says."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.agent_client.test_gate import stack

ROOT = Path(__file__).resolve().parents[2]


def snippet() -> str:
    doc = (ROOT / "README.md").read_text()
    section = doc.split("## Gate your own tools", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found, "no python snippet under 'Gate your own tools'"
    return found.group(1)


async def test_the_readme_gate_snippet_parks_runs_once_approved_and_prints(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    code = snippet()
    expected = re.search(r"print\(.*\)\s+#\s*(.+)\n", code)
    assert expected
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        env = {**os.environ, "PARKGATE_API_URL": base, "PARKGATE_API_KEY": api.key,
               "PYTHONPATH": str(ROOT)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=api.workspace, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            for _ in range(600):  # the snippet parks: a human approves it
                r = await api.http.get("/v1/tool-calls",
                                       params={"session_id": "notes", "status": "parked"})
                parked = r.json()["items"] if r.status_code == 200 else []
                if parked:
                    break
                assert proc.returncode is None, await proc.stderr.read()
                await asyncio.sleep(0.1)
            [call] = parked
            assert not (api.workspace / "notes.txt").exists()
            decided = await api.http.post(
                f"/v1/sessions/notes/turns/{call['turn_id']}/confirmations/"
                f"{call['request_id']}", json={"decision": "allow"})
            assert decided.status_code == 200, decided.text
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, err.decode()
        assert out.decode() == expected.group(1).strip() + "\n"
        assert (api.workspace / "notes.txt").read_text() == "hello from my own tool\n"
