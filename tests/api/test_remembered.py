"""Remembered decisions over HTTP: an allow with `remember` lets the same call
run again without parking (naming the rule and who made it), in its session or
workspace, until revoked or expired; shell rules are command prefixes that a
chained line never matches."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from temporalio.client import Client

from parkgate.models import utcnow
from parkgate.store.remembered import RULES
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import csrf_of
from tests.api.test_named_approvers import PEOPLE, POLICY, parked_for_admin

DAY = 24 * 3600


async def park(api: ApiRig, sid: str, name: str, inp: dict[str, Any],
               call_id: str | None = None) -> dict[str, Any]:
    cid = call_id or f"toolu_{uuid.uuid4().hex[:10]}"
    r = await api.submit(sid, name, inp, call_id=cid)
    assert r.status_code in (200, 202), r.text
    return await api.wait_parked(sid, cid)


async def approve(api: ApiRig, sid: str, parked: dict[str, Any],
                  remember: dict[str, Any] | None = None, *,
                  headers: dict[str, str] | None = None) -> Any:
    body: dict[str, Any] = {"decision": "allow"}
    if remember is not None:
        body["remember"] = remember
    return await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json=body, headers=headers or {},
    )


async def wait_final(api: ApiRig, sid: str, call_id: str) -> dict[str, Any]:
    for _ in range(400):
        body = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}")).json()
        if body.get("finished"):
            return dict(body)
        await asyncio.sleep(0.05)
    raise AssertionError(f"never finished: {body}")


async def outcome(api: ApiRig, sid: str, name: str, inp: dict[str, Any]) -> dict[str, Any]:
    """Submit and poll: the call once it has finished or parked."""
    cid = f"toolu_{uuid.uuid4().hex[:10]}"
    r = await api.submit(sid, name, inp, call_id=cid)
    assert r.status_code in (200, 202), r.text
    for _ in range(400):
        body = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}")).json()
        if body.get("finished") or (body.get("status") == "parked" and body.get("approval_url")):
            return dict(body)
        await asyncio.sleep(0.05)
    raise AssertionError(f"never settled: {body}")


async def remembered(api: ApiRig, **params: Any) -> list[dict[str, Any]]:
    r = await api.http.get("/v1/remembered", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def one_rule(api: ApiRig) -> dict[str, Any]:
    for _ in range(200):
        items = await remembered(api)
        if items:
            return items[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no rule was stored")


async def test_session_rule_runs_same_input_and_names_rule_and_approver(api: ApiRig) -> None:
    sid = await api.register()
    inp = {"path": "r.txt", "content": "one"}
    first = await park(api, sid, "write_file", inp)
    r = await approve(api, sid, first, {"scope": "session", "ttl_seconds": 3600})
    assert r.status_code == 200, r.text
    rule = await one_rule(api)
    human = (await api.repo.verify_api_key(api.human_key))
    assert human is not None
    assert (rule["scope"], rule["tool_name"], rule["match"], rule["created_by"]) == (
        "session", "write_file", "input", human.name)
    assert rule["rule"] == f"remembered:{rule['id']}" and rule["active"] is True

    again = await outcome(api, sid, "write_file", inp)
    assert again["status"] == "succeeded", again
    row = await api.repo.get_call(sid, again["tool_use_id"])
    assert row is not None
    assert (row.rule, row.decided_by, row.via, row.principal_id) == (
        rule["rule"], human.name, "remembered", f"key:{human.id}")
    events = await api.repo.call_events(sid, again["tool_use_id"])
    called = next(e for e in events if e.type == "tool.called")
    assert called.data["rule"] == rule["rule"] and called.data["approved_by"] == human.name
    assert not any(e.type == "tool.confirmation_requested" for e in events)

    # A different input parks; so does the same input in another session.
    other = await outcome(api, sid, "write_file", {"path": "r.txt", "content": "two"})
    assert other["status"] == "parked"
    sid2 = await api.register()
    elsewhere = await outcome(api, sid2, "write_file", inp)
    assert elsewhere["status"] == "parked"
    assert [x["id"] for x in await remembered(api, session_id=sid)] == [rule["id"]]
    assert await remembered(api, session_id=sid2) == []


async def test_workspace_rule_covers_other_sessions_and_revoke_parks_again(
    api: ApiRig,
) -> None:
    sid = await api.register()
    inp = {"path": "w.txt", "content": "w"}
    first = await park(api, sid, "write_file", inp)
    r = await approve(api, sid, first, {"scope": "workspace", "ttl_seconds": 600})
    assert r.status_code == 200, r.text
    rule = await one_rule(api)
    sid2 = await api.register()
    assert (await outcome(api, sid2, "write_file", inp))["status"] == "succeeded"

    # Another project neither sees nor revokes it.
    stranger, _ = await api.repo.create_api_key("other-project", project="payments",
                                                roles=["approver", "admin"])
    hs = {"Authorization": f"Bearer {stranger}"}
    assert (await api.http.get("/v1/remembered", headers=hs)).json()["items"] == []
    assert (await api.http.delete(f"/v1/remembered/{rule['id']}", headers=hs)).status_code == 404
    # The agent's key may not revoke; the approver may, once.
    refused = await api.http.delete(f"/v1/remembered/{rule['id']}",
                                    headers={"Authorization": f"Bearer {api.key}"})
    assert refused.status_code == 403
    revoked = await api.http.delete(f"/v1/remembered/{rule['id']}",
                                    headers={"Authorization": f"Bearer {api.human_key}"})
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["active"] is False and revoked.json()["revoked_by"]
    assert (await outcome(api, sid2, "write_file", inp))["status"] == "parked"
    assert await remembered(api) == []
    listed = await remembered(api, all="true")
    assert [x["id"] for x in listed] == [rule["id"]]
    missing = await api.http.delete("/v1/remembered/nope",
                                    headers={"Authorization": f"Bearer {api.human_key}"})
    assert missing.status_code == 404


async def test_expired_rule_parks_again(api: ApiRig) -> None:
    sid = await api.register()
    inp = {"path": "e.txt", "content": "e"}
    first = await park(api, sid, "write_file", inp)
    assert (await approve(api, sid, first, {"scope": "session", "ttl_seconds": 60})
            ).status_code == 200
    rule = await one_rule(api)
    async with api.repo.engine.begin() as conn:
        await conn.execute(update(RULES).where(RULES.c.rule_id == rule["id"])
                           .values(expires_at=utcnow() - timedelta(seconds=1)))
    assert (await outcome(api, sid, "write_file", inp))["status"] == "parked"
    assert await remembered(api) == []


async def test_shell_prefix_rule_never_matches_a_chain(api: ApiRig) -> None:
    sid = await api.register()
    first = await park(api, sid, "shell", {"command": "echo hello world"})
    r = await approve(api, sid, first, {"scope": "session", "ttl_seconds": 600,
                                        "command_prefix": "echo hello"})
    assert r.status_code == 200, r.text
    rule = await one_rule(api)
    assert (rule["match"], rule["command_prefix"]) == ("prefix", "echo hello")
    ran = await outcome(api, sid, "shell", {"command": "echo hello again && echo hello too"})
    assert ran["status"] == "succeeded", ran
    for line in ("echo hello; rm -rf nothing-here", "echo hello && touch x",
                 "echo hello $(touch y)", "echo hello > out.txt", "echo hi"):
        assert (await outcome(api, sid, "shell", {"command": line}))["status"] == "parked", line
    assert not (api.workspace / "x").exists() and not (api.workspace / "y").exists()


async def test_remember_is_validated(api: ApiRig) -> None:
    sid = await api.register()
    parked = await park(api, sid, "shell", {"command": "ls; whoami"})
    url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
    cases = [
        ({"decision": "allow", "remember": {"scope": "session", "ttl_seconds": 5}}, "ttl"),
        ({"decision": "allow", "remember": {"scope": "session", "ttl_seconds": 40 * DAY}},
         "ttl"),
        ({"decision": "allow", "remember": {"scope": "team", "ttl_seconds": 600}}, "scope"),
        ({"decision": "deny", "remember": {"scope": "session", "ttl_seconds": 600}},
         "only for allow"),
        ({"decision": "allow", "remember": {"scope": "session", "ttl_seconds": 600}},
         "plain command line"),
        ({"decision": "allow", "remember": {"scope": "session", "ttl_seconds": 600,
                                            "command_prefix": "rm"}}, "prefix"),
    ]
    for body, words in cases:
        r = await api.http.post(url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert words in r.text, r.text
    # Nothing was decided: the call still waits.
    view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{parked['tool_use_id']}")).json()
    assert view["status"] == "parked"


# Two calls with the same input parked at once: with `attach_same_input` (on by
# default) the second would attach to the first instead of parking (tested in
# tests/client_tools); here they must be two requests decided side by side.
async def test_concurrent_remembers_make_consistent_rules(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, attach_same_input=False) as api:
        await concurrent_remembers(api)


@pytest.mark.postgres
async def test_concurrent_remembers_on_postgres(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, pg_repo, tmp_path, attach_same_input=False) as api:
        await concurrent_remembers(api)


async def test_quorum_requests_are_not_remembered(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=POLICY, **PEOPLE) as api:
        bob, _ = await api.repo.create_api_key("bob-key", roles=["approver"])
        sid = await api.register()
        cid = "toolu_q"
        await api.submit(sid, "write_file", {"path": "q.txt", "content": "q"}, call_id=cid)
        for _ in range(400):
            row = await api.repo.get_call(sid, cid)
            if row is not None and row.request_id is not None and row.status == "parked":
                break
            await asyncio.sleep(0.05)
        assert row is not None and row.request_id
        r = await approve(api, sid, {"request_id": row.request_id},
                          {"scope": "session", "ttl_seconds": 600},
                          headers={"Authorization": f"Bearer {bob}"})
        assert r.status_code == 422 and "quorum" in r.text, r.text


async def concurrent_remembers(api: ApiRig) -> None:
    other, _ = await api.repo.create_api_key(f"human2-{uuid.uuid4().hex[:6]}",
                                               roles=["approver"])
    sid = await api.register()
    inp = {"path": "c.txt", "content": "c"}
    a = await park(api, sid, "write_file", inp)
    b = await park(api, sid, "write_file", inp)
    keep = {"scope": "session", "ttl_seconds": 600}
    ra, rb = await asyncio.gather(
        approve(api, sid, a, keep, headers={"Authorization": f"Bearer {api.human_key}"}),
        approve(api, sid, b, keep, headers={"Authorization": f"Bearer {other}"}),
    )
    assert (ra.status_code, rb.status_code) == (200, 200), (ra.text, rb.text)
    for cid in (a["tool_use_id"], b["tool_use_id"]):
        assert (await wait_final(api, sid, cid))["status"] == "succeeded"
    items = await remembered(api)
    assert sorted(i["request_id"] for i in items) == sorted([a["request_id"], b["request_id"]])
    assert len({i["created_by"] for i in items}) == 2
    # A retried record writes nothing new.
    await api.repo.save_remembered(
        (await api.repo.list_remembered(project="default"))[0])
    assert len(await remembered(api)) == 2
    again = await outcome(api, sid, "write_file", inp)
    assert again["status"] == "succeeded"
    assert again["rule"] == min(items, key=lambda i: (i["created_at"], i["id"]))["rule"]


async def test_personal_link_page_remembers(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    policy = {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"]}]}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=policy, **PEOPLE) as api:
        admin, _ = await api.repo.create_api_key("admin-key", roles=["admin"])
        sid = await api.register()
        inp = {"path": "p.txt", "content": "p"}
        await api.submit(sid, "write_file", inp, call_id="toolu_p")
        link = (await parked_for_admin(api, sid, "toolu_p", admin))["approver_links"]["alice"]
        path = link.removeprefix(api.base_url)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            page = await browser.get(path)
            assert 'data-testid="remember"' in page.text
            done = await browser.post(path, data={
                "csrf": csrf_of(page.text), "decision": "allow", "remember": "on",
                "remember_scope": "workspace", "remember_ttl": "3600"})
            assert done.status_code == 200, done.text
        rule = await one_rule(api)
        assert (rule["scope"], rule["created_by"], rule["approver"], rule["principal_id"]) == (
            "workspace", "alice", "alice", "approver:alice")
        again = await outcome(api, sid, "write_file", inp)
        assert again["status"] == "succeeded" and again["rule"] == rule["rule"]
        assert again["decided_by"] == "alice"


async def test_generic_link_cannot_remember(api: ApiRig) -> None:
    sid = await api.register()
    parked = await park(api, sid, "write_file", {"path": "g.txt", "content": "g"})
    path = parked["approval_url"].removeprefix(api.base_url)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        page = await browser.get(path)
        assert 'data-testid="remember"' not in page.text
        r = await browser.post(path, data={
            "csrf": csrf_of(page.text), "decision": "allow", "approver": "mallory",
            "remember": "on", "remember_scope": "workspace", "remember_ttl": "3600"})
    assert r.status_code == 422 and "named approver" in r.text
    view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{parked['tool_use_id']}")).json()
    assert view["status"] == "parked" and await remembered(api) == []


async def test_prompt_once_remembers_for_the_session(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    policy = {"per_tool": {"write_file": "prompt_once"}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=policy) as api:
        sid = await api.register()
        inp = {"path": "o.txt", "content": "o"}
        first = await park(api, sid, "write_file", inp)
        assert (await approve(api, sid, first)).status_code == 200
        rule = await one_rule(api)
        assert (rule["scope"], rule["request_id"]) == ("session", first["request_id"])
        again = await outcome(api, sid, "write_file", inp)
        assert again["status"] == "succeeded" and again["rule"] == rule["rule"]
        sid2 = await api.register()
        assert (await outcome(api, sid2, "write_file", inp))["status"] == "parked"


async def test_inbox_remembers_lists_and_revokes(api: ApiRig) -> None:
    from tests.api.test_inbox import browser_for, decide, flash, login

    sid = await api.register()
    inp = {"path": "i.txt", "content": "i"}
    first = await park(api, sid, "write_file", inp)
    async with browser_for(api) as browser:
        assert (await login(browser, api.human_key)).status_code == 303
        page = await browser.get("/inbox")
        assert 'data-testid="remember"' in page.text and 'data-testid="remembered"' not in page.text
        done = await decide(browser, first["request_id"], "allow", remember="on",
                            remember_scope="session", remember_ttl="3600")
        assert done.status_code == 303, done.text
        rule = await one_rule(api)
        assert rule["request_id"] == first["request_id"]
        page = await browser.get("/inbox")
        assert f'data-rule="{rule["id"]}"' in page.text
        assert (await outcome(api, sid, "write_file", inp))["status"] == "succeeded"
        # Someone else's rule id is refused; their own is revoked.
        token = re.search(r'remembered/revoke" class="inline">\s*<input type="hidden" '
                          r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None
        csrf = html.unescape(token.group(1))
        refused = await browser.post("/inbox/remembered/revoke",
                                     data={"csrf": csrf, "rule_id": "not-mine"},
                                     follow_redirects=True)
        assert "not yours to revoke" in flash(refused.text)
        revoked = await browser.post("/inbox/remembered/revoke",
                                     data={"csrf": csrf, "rule_id": rule["id"]},
                                     follow_redirects=True)
        assert "Revoked remembered decision" in flash(revoked.text)
    assert await remembered(api) == []
    assert (await outcome(api, sid, "write_file", inp))["status"] == "parked"
