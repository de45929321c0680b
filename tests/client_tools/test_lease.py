"""A client SIGKILLed after starting its claim: the lease ends (time-skipping
server) and the call is outcome_unknown, never released again; its report, if
it ever comes, is recorded late. Killed after claiming but before starting:
it never ran, and the call is released again when the reservation lapses."""

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
    start = sys.argv[4] == "start"
    auth = {"Authorization": "Bearer " + key}
    r = httpx.post(base + path + "/claim", json={"lease_seconds": 120}, headers=auth,
                   timeout=60)
    if start and r.status_code == 200:
        r = httpx.post(base + path + "/start", json={"claim_id": r.json()["claim_id"]},
                       headers=auth, timeout=60)
    print(r.status_code, r.json().get("input_sha256"), flush=True)
    time.sleep(3600)  # "running the tool" (or about to) when it is killed
""")


async def _killed_claimer(base: str, path: str, key: str, how: str) -> None:
    """A claimer process that claims (and starts, for `how` == "start"), then
    is SIGKILLed."""
    claimer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLAIMER, base, path, key, how, stdout=asyncio.subprocess.PIPE)
    assert claimer.stdout is not None
    line = (await asyncio.wait_for(claimer.stdout.readline(), 60)).decode().split()
    assert line[0] == "200", line
    os.kill(claimer.pid, signal.SIGKILL)
    await claimer.wait()


async def test_claimer_killed_after_starting_ends_outcome_unknown(
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
        await _killed_claimer(base, f"/v1/sessions/{sid}/tool-calls/toolu_k", api.key, "start")
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


async def test_claimer_killed_before_starting_leaves_the_call_released_again(
    temporal_env: WorkflowEnvironment, pg_repo: Repository, tmp_path: Path
) -> None:
    """Its claim was a reservation nobody started: at the reservation's end the
    call is released again (not outcome_unknown) and the next claimer runs it."""
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(temporal_env.client, pg_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await register(api)
        await api.submit(sid, "deploy", {"service": "r"}, call_id="toolu_r")
        parked = await api.wait_parked(sid, "toolu_r")
        await decide(api, sid, parked, {"decision": "allow"})
        r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_r", params={"wait": 30})
        assert r.json()["status"] == "released", r.text
        await _killed_claimer(base, f"/v1/sessions/{sid}/tool-calls/toolu_r", api.key, "claim")
        assert (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_r")
                ).json()["status"] == "claimed"
        await temporal_env.sleep(api.rig.settings.client_reserve_seconds + 30)
        again = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_r", params={"wait": 30})
        assert again.json()["status"] == "released", again.text
        claim = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_r/claim")
        assert claim.status_code == 200, claim.text
        start = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_r/start",
                                    json={"claim_id": claim.json()["claim_id"]})
        assert start.status_code == 200, start.text
        out = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_r/outcome", json={
            "content": "deployed", "input_sha256": claim.json()["input_sha256"]})
        assert out.status_code == 200 and out.json()["status"] == "succeeded", out.text
        events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_r/events")
        types = [e["type"] for e in events.json()["events"]]
        assert types.count("tool.claimed") == 2 and types.count("tool.claim_lapsed") == 1
        assert types.count("tool.claim_started") == 1 and "tool.lease_expired" not in types
        meaning = await api.repo.verify_meaning(sid)
        assert meaning.ok, [p.describe() for p in meaning.problems]
