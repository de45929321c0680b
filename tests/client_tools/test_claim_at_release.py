"""A submit that claims (`claim=true`): the claim is taken in the release's own
store write when policy releases the call at once (issue 27).

Real worker, Temporal dev server, Postgres, the API over HTTP.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from sqlalchemy import func, select

from parkgate.calls.events import make_event_id
from parkgate.models import input_sha256
from parkgate.store.base import _lock_key
from tests.api.rig import ApiRig
from tests.client_tools.test_client_calls import decide, register, released, verified


def _path(sid: str, cid: str, tail: str = "") -> str:
    return f"/v1/sessions/{sid}/tool-calls/{cid}{tail}"


async def test_a_claiming_submit_gets_the_call_claimed_with_its_release(api_pg: ApiRig) -> None:
    api = api_pg
    sid = await register(api)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                            params={"wait": 30, "claim": "true", "lease_seconds": 120},
                            json={"id": "toolu_c1", "name": "lookup", "input": {"q": "x"}})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "claimed" and body["claim_won"] is True, body
    assert body["input"] == {"q": "x"} and body["input_sha256"] == input_sha256({"q": "x"})
    assert body["claimed_by"].startswith("key:") and body["claim_id"]
    # A reservation until started: the lease asked for runs from the start.
    start = await api.http.post(_path(sid, "toolu_c1", "/start"),
                                json={"claim_id": body["claim_id"]})
    assert start.status_code == 200, start.text
    lease = (datetime.fromisoformat(start.json()["lease_expires_at"])
             - datetime.fromisoformat(start.json()["started_at"]))
    assert lease.total_seconds() == 120 and start.json()["started"] is True
    # Nobody else can claim it, and the same submit again does not win it again.
    other = await api.http.post(_path(sid, "toolu_c1", "/claim"), json={})
    assert other.status_code == 409 and other.json()["error"]["code"] == "already_claimed", \
        other.text
    again = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                                params={"claim": "true"},
                                json={"id": "toolu_c1", "name": "lookup", "input": {"q": "x"}})
    assert again.json()["status"] == "claimed" and again.json()["claim_won"] is None
    # Released and claimed in one write: the claim's event says so.
    claimed = await api.repo.get_event(make_event_id(sid, "toolu_c1", "tool.claimed"))
    assert claimed is not None and claimed.data["at_release"] is True
    report = {"content": "found x", "is_error": False, "input_sha256": body["input_sha256"]}
    out = await api.http.post(_path(sid, "toolu_c1", "/outcome"), json=report)
    assert out.status_code == 200, out.text
    assert out.json()["status"] == "succeeded"
    assert out.json()["result"]["content"][0]["text"] == "found x"
    same = await api.http.post(_path(sid, "toolu_c1", "/outcome"), json=report)
    assert same.status_code == 200 and same.json()["status"] == "succeeded"
    conflict = await api.http.post(_path(sid, "toolu_c1", "/outcome"),
                                   json={**report, "content": "something else"})
    assert conflict.status_code == 409, conflict.text
    reported = await api.repo.get_event(make_event_id(sid, "toolu_c1", "tool.outcome_reported"))
    assert reported is not None and reported.data["report_sha256"]
    events = await api.http.get(_path(sid, "toolu_c1", "/events"))
    types = [e["type"] for e in events.json()["events"]]
    for kind in ("tool.released", "tool.claimed", "tool.outcome_reported", "tool.completed"):
        assert types.count(kind) == 1, (kind, types)
    await verified(api, sid)


async def test_a_claiming_submit_without_wait_waits_for_the_verdict(api_pg: ApiRig) -> None:
    sid = await register(api_pg)
    r = await api_pg.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                               params={"claim": "true"},
                               json={"id": "toolu_c2", "name": "lookup", "input": {"q": "y"}})
    body = r.json()
    assert body["status"] == "claimed" and body["claim_won"] is True, body
    assert body["input"] == {"q": "y"}


async def test_a_parked_call_is_released_unclaimed_after_its_decision(api_pg: ApiRig) -> None:
    """The submitter of a call that parks may be long gone when a human decides:
    its claim is not taken at the release; a client claims when it comes back."""
    api = api_pg
    sid = await register(api)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                            params={"claim": "true"},
                            json={"id": "toolu_c3", "name": "deploy",
                                  "input": {"service": "web"}})
    assert r.json()["status"] == "parked" and r.json()["claim_won"] is None, r.text
    parked = await api.wait_parked(sid, "toolu_c3")
    await decide(api, sid, parked, {"decision": "allow", "decided_by": "alice"})
    body = await released(api, sid, "toolu_c3")
    assert body["claimed_by"] is None
    claim = await api.http.post(_path(sid, "toolu_c3", "/claim"), json={})
    assert claim.status_code == 200, claim.text
    assert claim.json()["input"] == {"service": "web"}


async def test_a_claim_that_outruns_the_release_write_waits_for_it(api_pg: ApiRig) -> None:
    """The API may read `released` (or a client claim) before the workflow has
    seen its release write complete: the claim is accepted and waits for the
    write, never refused as `not_released` (Claude Code got `deny` for a call
    policy allowed)."""
    api = api_pg
    sid = await register(api)
    async with api.repo.engine.connect() as blocker:
        # The store is slow: the session's write lock is held elsewhere.
        await blocker.begin()
        await blocker.execute(select(func.pg_advisory_xact_lock(_lock_key(sid))))
        r = await api.submit(sid, "lookup", {"q": "z"}, call_id="toolu_c4")
        assert r.status_code == 202, r.text
        for _ in range(200):  # the workflow has released it; its write is held
            view = await api.rig.dispatcher.status(sid, "toolu_c4")
            if view.release is not None:
                break
            await asyncio.sleep(0.05)
        assert view.release is not None and view.status.value == "queued"
        claim = asyncio.ensure_future(
            api.http.post(_path(sid, "toolu_c4", "/claim"), json={}))
        await asyncio.sleep(1.0)
        assert not claim.done()  # accepted, waiting for the release write
        await blocker.rollback()
    won = await claim
    assert won.status_code == 200, won.text
    assert won.json()["input"] == {"q": "z"}
    events = await api.http.get(_path(sid, "toolu_c4", "/events"))
    types = [e["type"] for e in events.json()["events"]]
    assert types.index("tool.released") < types.index("tool.claimed"), types
