"""A client SIGKILLed after claiming: the lease ends (time-skipping server) and the
call is outcome_unknown, never released again; its report, if it ever comes,
is recorded late."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from parkgate.store.repository import Repository
from tests.api.rig import api_rig, free_socket, live_server
from tests.client_tools.test_client_calls import decide, register

CLAIMER = textwrap.dedent("""
    import sys, time, httpx
    base, path, key = sys.argv[1:4]
    r = httpx.post(base + path, json={"lease_seconds": 120},
                   headers={"Authorization": "Bearer " + key}, timeout=60)
    print(r.status_code, r.json().get("input_sha256"), flush=True)
    time.sleep(3600)  # "running the tool" when it is killed
""")


async def test_claimer_killed_after_claiming_ends_outcome_unknown(
    temporal_env: WorkflowEnvironment, pg_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(temporal_env.client, pg_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await register(api)
        await api.submit(sid, "deploy", {"service": "k"}, call_id="toolu_k")
        parked = await api.wait_parked(sid, "toolu_k")
        await decide(api, sid, parked, {"decision": "allow"})
        r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k", params={"wait": 30})
        assert r.json()["status"] == "released", r.text
        claimer = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLAIMER, base, f"/v1/sessions/{sid}/tool-calls/toolu_k/claim",
            api.key, stdout=asyncio.subprocess.PIPE)
        assert claimer.stdout is not None
        line = (await asyncio.wait_for(claimer.stdout.readline(), 60)).decode().split()
        assert line[0] == "200", line
        os.kill(claimer.pid, signal.SIGKILL)
        await claimer.wait()
        # The lease (120 s) ends on the durable timer: skip past it.
        await temporal_env.sleep(180)
        final = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k", params={"wait": 30})
        body = final.json()
        assert body["status"] == "outcome_unknown" and body["finished"] is True, body
        assert body["result"]["is_error"] is True
        # Never released again.
        again = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_k/claim")
        assert again.status_code == 409 and again.json()["error"]["code"] == "ended"
        events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k/events")
        types = [e["type"] for e in events.json()["events"]]
        assert types.count("tool.released") == 1 and types.count("tool.claimed") == 1
        assert types.count("tool.lease_expired") == 1
        assert "tool.completed" not in types and "tool.failed" not in types
