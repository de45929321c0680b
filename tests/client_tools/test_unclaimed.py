"""A released client call nobody claims ends `unclaimed` (issue 37): it never
runs, later claims are refused with 409 naming why (time-skipping server)."""

from __future__ import annotations

from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from parkgate.store.repository import Repository
from tests.api.rig import api_rig
from tests.client_tools.test_client_calls import decide, register, released, verified


async def test_release_nobody_claims_ends_unclaimed(
    temporal_env: WorkflowEnvironment, pg_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(temporal_env.client, pg_repo, tmp_path,
                       client_unclaimed_seconds=7200) as api:
        sid = await register(api)
        await api.submit(sid, "deploy", {"service": "u"}, call_id="toolu_u")
        parked = await api.wait_parked(sid, "toolu_u")
        await decide(api, sid, parked, {"decision": "allow"})
        await released(api, sid, "toolu_u")
        # The release waits 2 h on a durable timer: skip past it.
        await temporal_env.sleep(7300)
        final = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_u", params={"wait": 30})
        body = final.json()
        assert body["status"] == "unclaimed" and body["finished"] is True, body
        assert body["result"]["is_error"] is True
        assert "never ran" in body["result"]["content"][0]["text"]
        again = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_u/claim")
        assert again.status_code == 409, again.text
        error = again.json()["error"]
        assert error["code"] == "ended" and "unclaimed" in error["message"], error
        events = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_u/events")
        types = [e["type"] for e in events.json()["events"]]
        assert types.count("tool.released") == 1 and types.count("tool.unclaimed") == 1
        assert "tool.claimed" not in types and "tool.completed" not in types
        await verified(api, sid)
