"""Who may do what: roles x endpoints, project isolation, separation of duties,
authenticated deciders, approval links only for deciders, per-key rate limits.
(The matrix is docs/HTTP.md's authorization table.)"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import login

ROLES = ("agent", "approver", "auditor", "admin")
OK, FORBIDDEN = "ok", 403

#: endpoint -> roles that may call it (every other role gets 403).
MATRIX: dict[str, set[str]] = {
    "register_session": {"agent"},
    "get_session": set(ROLES),
    "submit": {"agent"},
    "submit_batch": {"agent"},
    "get_call": set(ROLES),
    "cancel_call": {"agent"},
    "cancel_session": {"agent"},
    "claim": {"agent"},
    "start": {"agent"},
    "outcome": {"agent"},
    "claude_code_hook": {"agent"},
    "agent_hook": {"agent"},
    "tools": set(ROLES),
    "decide": {"approver"},
    "audit_query": {"auditor"},
    "call_events": set(ROLES),
    "call_output": set(ROLES),
    "session_events": set(ROLES),
    "list_remembered": set(ROLES),
    "revoke_remembered": {"approver", "admin"},
    "list_workspaces": {"admin"},
    "grant_workspace": {"admin"},
    "revoke_workspace_grant": {"admin"},
}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def request_for(api: ApiRig, endpoint: str, sid: str, key: str) -> httpx.Response:
    """One request per endpoint, shaped so that passing authorization gives a
    non-403 answer (2xx, or 404 for the made-up approval request)."""
    h = bearer(key)
    http = api.http
    call = f"/v1/sessions/{sid}/tool-calls/toolu_r"
    read = {"id": f"toolu_{endpoint}", "name": "read_file", "input": {"path": "a.txt"}}
    match endpoint:
        case "register_session":
            return await http.post("/v1/sessions", headers=h, json={
                "session_id": sid, "workspace_path": str(api.workspace)})
        case "get_session":
            return await http.get(f"/v1/sessions/{sid}", headers=h)
        case "submit":
            return await http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=h,
                                   json=read)
        case "submit_batch":
            return await http.post(f"/v1/sessions/{sid}/turns/tb/tool-calls:batch", headers=h,
                                   json={"calls": [read]})
        case "get_call":
            return await http.get(call, headers=h)
        case "cancel_call":
            return await http.post(f"{call}/cancel", headers=h)
        case "cancel_session":
            return await http.post(f"/v1/sessions/{sid}/cancel", headers=h)
        case "claim":
            return await http.post(f"{call}/claim", headers=h)
        case "start":
            return await http.post(f"{call}/start", headers=h, json={"claim_id": "c"})
        case "outcome":
            return await http.post(f"{call}/outcome", headers=h,
                                   json={"content": "x", "input_sha256": "0" * 64})
        case "claude_code_hook":
            return await http.post("/v1/hooks/claude-code", headers=h, json={
                "hook_event_name": "PostToolUse", "session_id": sid, "tool_name": "Read",
                "tool_input": {}, "tool_use_id": "toolu_none", "tool_response": "x"})
        case "agent_hook":
            return await http.post("/v1/hooks/codex", headers=h, json={
                "hook_event_name": "PostToolUse", "session_id": sid, "turn_id": "t1",
                "cwd": "/", "tool_name": "Bash", "tool_input": {"command": "true"},
                "tool_use_id": "call_none", "tool_response": "x"})
        case "tools":
            return await http.get(f"/v1/sessions/{sid}/tools", headers=h)
        case "decide":
            return await http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/req_none",
                                   headers=h, json={"decision": "allow"})
        case "audit_query":
            return await http.get("/v1/tool-calls", headers=h)
        case "call_events":
            return await http.get(f"{call}/events", headers=h)
        case "call_output":
            return await http.get(f"{call}/output", headers=h)
        case "session_events":
            return await http.get(f"/v1/sessions/{sid}/events", headers=h,
                                  params={"follow": "false"})
        case "list_remembered":
            return await http.get("/v1/remembered", headers=h)
        case "revoke_remembered":
            return await http.delete("/v1/remembered/rule_none", headers=h)
        case "list_workspaces":
            return await http.get("/v1/workspaces", headers=h)
        case "grant_workspace":  # a directory of the session's workspace, to another project
            return await http.post("/v1/workspaces/grants", headers=h, json={
                "path": str(api.workspace / "shared"), "project": "payments"})
        case "revoke_workspace_grant":
            return await http.delete("/v1/workspaces/grants", headers=h, params={
                "path": str(api.workspace / "shared"), "project": "payments"})
    raise AssertionError(endpoint)


async def role_keys(repo: Repository, project: str = "default") -> dict[str, str]:
    keys = {}
    for role in ROLES:
        key, _ = await repo.create_api_key(f"{project}-{role}-only", project=project,
                                           roles=[role])
        keys[role] = key
    return keys


async def test_every_role_on_every_endpoint(api: ApiRig) -> None:
    keys = await role_keys(api.repo)
    sid = await api.register()
    (api.workspace / "a.txt").write_text("a")
    r = await api.submit(sid, "read_file", {"path": "a.txt"}, call_id="toolu_r", wait=20)
    assert r.status_code == 200, r.text
    seen: dict[tuple[str, str], Any] = {}
    for endpoint, allowed in MATRIX.items():
        for role in ROLES:
            got = await request_for(api, endpoint, sid, keys[role])
            want = OK if role in allowed else FORBIDDEN
            if want == FORBIDDEN:
                assert got.status_code == 403, (endpoint, role, got.text)
                assert got.json()["error"]["code"] == "forbidden"
            else:
                assert got.status_code != 403 and got.status_code < 500, (endpoint, role, got.text)
                if endpoint in ("decide", "revoke_remembered"):  # authorized; no such one
                    assert got.status_code == 404, got.text
                elif endpoint in ("claim", "start", "outcome"):  # authorized; a hosted call
                    assert got.status_code == 409, got.text
                else:
                    assert got.status_code in (200, 201, 202), (endpoint, role, got.text)
            seen[(endpoint, role)] = got.status_code
    assert len(seen) == len(MATRIX) * len(ROLES)


async def test_audit_pages_need_the_auditor_role(api: ApiRig) -> None:
    keys = await role_keys(api.repo)
    for role in ROLES:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            r = await login(api, browser, keys[role])
            if role == "auditor":
                assert r.status_code == 303, r.text
                assert (await browser.get("/audit")).status_code == 200
            else:
                assert r.status_code == 403 and "no auditor role" in r.text
                assert (await browser.get("/audit")).status_code == 303  # to the login


async def test_other_projects_get_404_for_sessions_calls_events_sse_and_audit(
    api: ApiRig,
) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "p.txt", "content": "p"}, call_id="toolu_p")
    parked = await api.wait_parked(sid, "toolu_p")
    rid = parked["request_id"]
    other, _ = await api.repo.create_api_key(
        "other-project", project="payments", roles=["agent", "approver", "auditor", "admin"])
    h = bearer(other)
    base = f"/v1/sessions/{sid}"
    call = f"{base}/tool-calls/toolu_p"
    for method, url, body in [
        ("GET", base, None),
        ("GET", call, None),
        ("GET", f"{call}/events", None),
        ("GET", f"{base}/events?follow=false", None),
        ("GET", f"{base}/tools", None),
        ("POST", f"{call}/cancel", None),
        ("POST", f"{base}/cancel", None),
        ("POST", f"{base}/turns/t1/tool-calls",
         {"id": "toolu_x", "name": "read_file", "input": {"path": "a"}}),
        ("POST", f"{base}/turns/t1/confirmations/{rid}", {"decision": "allow"}),
    ]:
        r = await api.http.request(method, url, headers=h, json=body)
        assert r.status_code == 404, (method, url, r.text)
        assert r.json()["error"]["code"] == "not_found"
    listed = (await api.http.get("/v1/tool-calls", headers=h, params={"session_id": sid})).json()
    assert listed["items"] == []
    # The session id is taken, but the other project's workspace is not disclosed.
    taken = await api.http.post("/v1/sessions", headers=h, json={
        "session_id": sid, "workspace_path": str(api.workspace)})
    assert taken.status_code == 409 and "workspace_path" not in taken.json()["error"]["details"]
    # Audit pages: the list shows none of it, the call page is 404.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, api.human_key)).status_code == 303
        mine = await browser.get("/audit", params={"session_id": sid})
        href = re.search(r'href="(/audit/calls/\d+)"', mine.text)
        assert href, mine.text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, other)).status_code == 303
        theirs = await browser.get("/audit", params={"session_id": sid})
        assert "/audit/calls/" not in theirs.text
        assert (await browser.get(href.group(1))).status_code == 404
    # The call is still parked, undecided.
    still = await api.http.get(call)
    assert still.json()["status"] == "parked"


async def test_the_agent_never_gets_the_link_and_cannot_approve_itself(api: ApiRig) -> None:
    both, _rec = await api.repo.create_api_key("agent-and-approver",
                                              roles=["agent", "approver"])
    sid = await api.register()
    h = bearer(both)
    sub = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=h, json={
        "id": "toolu_self", "name": "write_file", "input": {"path": "s.txt", "content": "s"}})
    assert sub.status_code in (200, 202) and sub.json()["approval_url"] is None
    parked = await api.wait_parked(sid, "toolu_self")  # the human key sees the link
    assert parked["approval_url"]
    mine = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self", headers=h)).json()
    assert mine["status"] == "parked" and mine["approval_url"] is None
    assert mine["links"]["approval"] is None and mine["request_id"] == parked["request_id"]
    agent_view = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self",
                                    headers=bearer(api.key))
    assert agent_view.json()["approval_url"] is None
    events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self/events",
                                 headers=h)).json()["events"]
    assert [e["approval_url"] for e in events] == [None]
    sse = await api.http.get(f"/v1/sessions/{sid}/events", headers=h,
                             params={"follow": "false"})
    assert '"approval_url": null' in sse.text and "/approve/" not in sse.text

    url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
    refused = await api.http.post(url, headers=h, json={"decision": "allow",
                                                       "decided_by": "alice (human)"})
    assert refused.status_code == 403, refused.text
    assert "separation of duties" in refused.json()["error"]["message"]
    assert not (api.workspace / "s.txt").exists()
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self")
    assert still.json()["status"] == "parked"
    # The link reaches approvers through the audit pages, never the agent.
    pages = {}
    for who, key in (("agent", api.key), ("human", api.human_key)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            assert (await login(api, browser, key)).status_code == 303
            listing = await browser.get("/audit", params={"session_id": sid})
            href = re.search(r'href="(/audit/calls/\d+)"', listing.text)
            assert href
            pages[who] = (await browser.get(href.group(1))).text
    assert 'data-testid="approval-link"' not in pages["agent"]
    assert html.escape(parked["approval_url"]) in pages["human"]


async def test_forged_decided_by_is_recorded_only_as_a_claim(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "f.txt", "content": "f"}, call_id="toolu_f")
    parked = await api.wait_parked(sid, "toolu_f")
    human = await api.repo.verify_api_key(api.human_key)
    assert human is not None
    forged = "alice@security-team (human)"
    r = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json={"decision": "allow", "decided_by": forged})
    assert r.status_code == 200, r.text
    decision = r.json()["decision"]
    assert decision["decided_by"] == human.name and decision["claimed_name"] == forged
    assert decision["principal_id"] == f"key:{human.id}" and decision["via"] == "api"
    done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_f",
                               params={"wait": 20})).json()
    assert done["status"] == "succeeded"
    assert (done["decided_by"], done["claimed_name"], done["principal_id"]) == (
        human.name, forged, f"key:{human.id}")
    row = await api.repo.get_call(sid, "toolu_f")
    assert row is not None and (row.decided_by, row.claimed_name) == (human.name, forged)
    approval = await api.repo.get_approval(parked["request_id"])
    assert approval is not None
    assert (approval.decided_by, approval.claimed_name, approval.principal_id) == (
        human.name, forged, f"key:{human.id}")
    events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_f/events")).json()
    resolved = next(e for e in events["events"] if e["type"] == "tool.confirmation_resolved")
    assert resolved["data"]["decided_by"] == human.name
    assert resolved["data"]["claimed_name"] == forged
    assert resolved["data"]["principal_id"] == f"key:{human.id}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, api.human_key)).status_code == 303
        listing = await browser.get("/audit", params={"session_id": sid})
        assert f"(claimed: {html.escape(forged)})" in listing.text
        href = re.search(r'href="(/audit/calls/\d+)"', listing.text)
        assert href
        page = (await browser.get(href.group(1))).text
        assert f"allow by {human.name} via api" in page
        assert f"key:{human.id}" in page and html.escape(forged) in page


async def test_a_rule_may_allow_self_approval_and_the_audit_shows_it(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    policy = {"rules": [{"tool": "write_file", "mode": "prompt", "self_approval": True}]}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=policy) as api:
        both, _rec = await api.repo.create_api_key("solo", roles=["agent", "approver", "auditor"])
        h = bearer(both)
        sid = await api.register()
        sub = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=h, json={
            "id": "toolu_solo", "name": "write_file",
            "input": {"path": "solo.txt", "content": "s"}})
        assert sub.status_code in (200, 202), sub.text
        parked = await api.wait_parked(sid, "toolu_solo")
        mine = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_solo", headers=h)
        assert mine.json()["approval_url"] == parked["approval_url"]  # it may decide
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}", headers=h,
            json={"decision": "allow"})
        assert r.status_code == 200, r.text
        assert r.json()["decision"]["self_approved"] is True
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_solo",
                                   params={"wait": 20})).json()
        assert done["status"] == "succeeded" and done["self_approved"] is True
        events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_solo/events")).json()
        resolved = [e for e in events["events"] if e["type"] == "tool.confirmation_resolved"]
        assert resolved[0]["data"]["self_approved"] is True
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            assert (await login(api, browser, both)).status_code == 303
            listing = await browser.get("/audit", params={"session_id": sid})
            assert "(self-approved)" in listing.text
            href = re.search(r'href="(/audit/calls/\d+)"', listing.text)
            assert href
            assert 'data-testid="self-approved"' in (await browser.get(href.group(1))).text


async def test_rate_limit_per_key_answers_429_with_retry_after(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       rate_limit_per_second=0.2, rate_limit_burst=3) as api:
        noisy, _ = await api.repo.create_api_key("noisy", roles=["auditor"])
        quiet, _ = await api.repo.create_api_key("quiet", roles=["auditor"])
        codes = [(await api.http.get("/v1/tool-calls", headers=bearer(noisy))).status_code
                 for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = await api.http.get("/v1/tool-calls", headers=bearer(noisy))
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(limited.headers["Retry-After"]) <= 5
        # Another key is not starved by the noisy one.
        assert (await api.http.get("/v1/tool-calls", headers=bearer(quiet))).status_code == 200


async def test_rate_limits_are_off_by_default(api: ApiRig) -> None:
    assert api.rig.settings.rate_limit_per_second == 0
    codes = {(await api.http.get("/v1/tool-calls")).status_code for _ in range(40)}
    assert codes == {200}


def test_matrix_covers_every_v1_route() -> None:
    """A new /v1 endpoint must be added to the matrix (and docs/HTTP.md)."""
    from parkgate.api.agents import v1
    from parkgate.api.people import routes_remembered

    routes = {f"{m} {r.path}" for r in (*(r for v in v1.ROUTERS for r in v.routes),
                                         *routes_remembered.router.routes)
              for m in getattr(r, "methods", set())}
    assert len(routes) == len(MATRIX), sorted(routes)
