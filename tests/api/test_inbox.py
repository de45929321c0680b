"""The approver inbox: who sees what, filters, deciding in place without
JavaScript (CSRF, PRG flash), concurrent deciders, personal inbox links, and
the SSE stream that tells the page when the set of waiting calls changes."""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.approvals.links import sign_inbox_token
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server
from tests.api.test_audit_pages import csrf_of


def browser_for(api: ApiRig, base_url: str | None = None) -> httpx.AsyncClient:
    if base_url is not None:
        return httpx.AsyncClient(base_url=base_url, timeout=30)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                             base_url=api.base_url, timeout=60)


async def login(browser: httpx.AsyncClient, key: str) -> httpx.Response:
    page = await browser.get("/inbox/login")
    return await browser.post("/inbox/login", data={"csrf": csrf_of(page.text), "api_key": key,
                                                    "next": "/inbox"})


def form_csrf(page: str) -> str:
    """The decision forms' token (the sign-out form in the header has its own)."""
    match = re.search(r'class="decide">\s*<input type="hidden" name="csrf" value="([^"]+)"', page)
    assert match, page[:3000]
    return html.unescape(match.group(1))


def items(page: str) -> list[str]:
    """The request ids listed, in page order."""
    return re.findall(r'data-rid="([^"]+)" data-testid="item"', page)


def flash(page: str) -> str:
    match = re.search(r'data-testid="flash">([^<]*)<', page)
    assert match, page[:2000]
    return html.unescape(match.group(1))


async def park(api: ApiRig, sid: str, call_id: str, path: str = "f.txt",
               content: str = "new\n") -> str:
    await api.submit(sid, "write_file", {"path": path, "content": content}, call_id=call_id)
    return str((await api.wait_parked(sid, call_id))["request_id"])


async def decide(browser: httpx.AsyncClient, rid: str, decision: str, *,
                 action: str = "/inbox/decide", page_url: str = "/inbox",
                 **extra: str) -> httpx.Response:
    page = await browser.get(page_url)
    assert rid in items(page.text), page.text[:3000]
    return await browser.post(action, data={"csrf": form_csrf(page.text), "request_id": rid,
                                            "decision": decision, **extra})


async def wait_status(api: ApiRig, sid: str, call_id: str) -> dict[str, Any]:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}", params={"wait": 20})
    return dict(r.json())


async def test_authorization_and_visibility(api: ApiRig) -> None:
    # Another project's parked call, and a call submitted by a key that is
    # also an approver: neither is in the human's inbox.
    other, _ = await api.repo.create_api_key("other-agent", project="other",
                                             roles=["agent", "approver"])
    both, _ = await api.repo.create_api_key("both", roles=["agent", "approver"])
    sid = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    mine = await park(api, sid, "toolu_a")
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                            headers={"Authorization": f"Bearer {both}"},
                            json={"id": "toolu_own", "name": "write_file",
                                  "input": {"path": "g.txt", "content": "g"}})
    assert r.status_code in (200, 202), r.text
    own = str((await api.wait_parked(sid, "toolu_own"))["request_id"])
    osid = "s-other-proj"
    # The workspace is the default project's: an admin shares it with "other".
    await api.repo.grant_workspace(str(api.workspace), "other", by="cli")
    r = await api.http.post("/v1/sessions", headers={"Authorization": f"Bearer {other}"},
                            json={"session_id": osid, "workspace_path": str(api.workspace)})
    assert r.status_code in (200, 201), r.text
    r = await api.http.post(f"/v1/sessions/{osid}/turns/t1/tool-calls",
                            headers={"Authorization": f"Bearer {other}"},
                            json={"id": "toolu_o", "name": "write_file",
                                  "input": {"path": "o.txt", "content": "o"}})
    assert r.status_code in (200, 202), r.text
    for _ in range(400):
        row = await api.repo.get_call(osid, "toolu_o")
        if row is not None and row.request_id:
            break
        await asyncio.sleep(0.05)
    assert row is not None and row.request_id
    async with browser_for(api) as browser:
        r = await browser.get("/inbox", params={"tool_name": "write_file"})
        assert r.status_code == 303
        assert r.headers["location"] == "/inbox/login?next=%2Finbox%3Ftool_name%3Dwrite_file"
        assert (await browser.get("/inbox/stream")).status_code == 401
        refused = await login(browser, api.key)  # agent + auditor: no approver role
        assert refused.status_code == 403 and "no approver role" in refused.text
        assert "pg_inbox=" not in refused.headers.get("set-cookie", "")
        bad = await login(browser, "pgk_wrong")
        assert bad.status_code == 401
        forged = await browser.post("/inbox/login", data={"api_key": api.human_key})
        assert forged.status_code == 403 and "The form expired" in forged.text
        assert "pg_inbox=" not in forged.headers.get("set-cookie", "")
        ok = await login(browser, api.human_key)
        assert ok.status_code == 303 and ok.headers["location"] == "/inbox"
        page = await browser.get("/inbox")
        assert page.status_code == 200
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        listed = items(page.text)
        assert mine in listed and own in listed  # the human submitted neither
        assert row.request_id not in listed
        # The dual-role key never sees its own submission.
    async with browser_for(api) as browser:
        assert (await login(browser, both)).status_code == 303
        listed = items((await browser.get("/inbox")).text)
        assert mine in listed and own not in listed and row.request_id not in listed
        # Deciding it by POST anyway is refused (separation of duties).
        page = await browser.get("/inbox")
        r = await browser.post("/inbox/decide", data={
            "csrf": form_csrf(page.text), "request_id": own, "decision": "allow"})
        assert r.status_code == 303
        assert "is not waiting for you" in flash((await browser.get("/inbox")).text)
    assert (await api.repo.get_approval(own)).decision is None  # type: ignore[union-attr]
    # The other project's approver sees only its own project's call.
    other_human, _ = await api.repo.create_api_key("other-human", project="other",
                                                   roles=["approver"])
    async with browser_for(api) as browser:
        assert (await login(browser, other_human)).status_code == 303
        assert items((await browser.get("/inbox")).text) == [row.request_id]
        # ... and cannot decide this project's call by posting its id.
        page = await browser.get("/inbox")
        r = await browser.post("/inbox/decide", data={
            "csrf": form_csrf(page.text), "request_id": mine, "decision": "deny"})
        assert "is not waiting for you" in flash((await browser.get(r.headers["location"])).text)
    assert (await api.repo.get_approval(mine)).decision is None  # type: ignore[union-attr]


async def test_filters_and_newest_first(api: ApiRig) -> None:
    s1 = await api.register()
    s2 = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    first = await park(api, s1, "toolu_f1")
    second = await park(api, s2, "toolu_f2", path="h.txt")
    await api.submit(s2, "shell", {"command": "echo hi"}, call_id="toolu_sh")
    third = str((await api.wait_parked(s2, "toolu_sh"))["request_id"])
    async with browser_for(api) as browser:
        assert (await login(browser, api.human_key)).status_code == 303
        everything = items((await browser.get("/inbox")).text)
        assert everything[:3] == [third, second, first]
        assert items((await browser.get("/inbox", params={"session_id": s1})).text) == [first]
        assert items((await browser.get("/inbox", params={"session_id": s2})).text) == [
            third, second]
        assert items((await browser.get("/inbox", params={"tool_name": "shell"})).text) == [
            third]
        write = items((await browser.get("/inbox", params={"side_effects": "write",
                                                            "session_id": s2})).text)
        assert write == [second]
        execute = await browser.get("/inbox", params={"side_effects": "execute"})
        assert third in items(execute.text) and second not in items(execute.text)
        none = await browser.get("/inbox", params={"tool_name": "nope"})
        assert items(none.text) == [] and "Nothing waiting for you" in none.text
        # The item shows the rule and the diff.
        page = (await browser.get("/inbox", params={"session_id": s1})).text
        assert 'data-testid="rule"' in page and "write_file" in page
        assert 'class="d-add">+new</span>' in page and 'class="d-del">-old</span>' in page


async def test_approve_in_place_without_js_and_csrf(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    rid = await park(api, sid, "toolu_ok")
    oncall, _ = await api.repo.create_api_key("oncall", roles=["approver"])
    async with browser_for(api) as browser:
        assert (await login(browser, oncall)).status_code == 303
        page = await browser.get("/inbox")
        token = form_csrf(page.text)
        no_csrf = await browser.post("/inbox/decide", data={"request_id": rid,
                                                            "decision": "allow"})
        assert no_csrf.status_code == 403 and "Form expired" in no_csrf.text
        wrong = await browser.post("/inbox/decide", data={"csrf": token + "x", "request_id": rid,
                                                          "decision": "allow"})
        assert wrong.status_code == 403
        cross = await browser.post("/inbox/decide", headers={"Origin": "https://evil.example"},
                                   data={"csrf": token, "request_id": rid, "decision": "allow"})
        assert cross.status_code == 403
        assert (await api.repo.get_approval(rid)).decision is None  # type: ignore[union-attr]
        r = await browser.post("/inbox/decide", data={
            "csrf": token, "request_id": rid, "decision": "allow", "back": "session_id=" + sid})
        assert r.status_code == 303 and r.headers["location"] == f"/inbox?session_id={sid}"
        after = await browser.get(r.headers["location"])
        assert "You approved write_file (toolu_ok). The call is running now." == flash(after.text)
        assert rid not in items(after.text)
        # The flash is shown once.
        assert 'data-testid="flash"' not in (await browser.get("/inbox")).text
        # Revoking the key ends the inbox session.
        await api.repo.revoke_api_key("oncall")
        assert (await browser.get("/inbox")).status_code == 303
    done = await wait_status(api, sid, "toolu_ok")
    assert done["status"] == "succeeded" and done["via"] == "inbox"
    assert done["decided_by"] == "oncall" and done["principal_id"].startswith("key:")
    assert (api.workspace / "f.txt").read_text() == "new\n"


async def test_deny_and_allow_with_edits(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    denied = await park(api, sid, "toolu_d")
    edited = await park(api, sid, "toolu_e", path="e.txt", content="from agent\n")
    async with browser_for(api) as browser:
        assert (await login(browser, api.human_key)).status_code == 303
        r = await decide(browser, denied, "deny", reason="not at 3 a.m.")
        assert r.status_code == 303
        assert "You denied write_file (toolu_d)" in flash((await browser.get("/inbox")).text)
        bad = await decide(browser, edited, "allow_with_edits", edited_input="{not json")
        assert bad.status_code == 422
        assert "not valid JSON" in bad.text and "{not json" in bad.text
        r = await decide(browser, edited, "allow_with_edits",
                         edited_input=json.dumps({"path": "e.txt", "content": "edited\n"}))
        assert r.status_code == 303
        assert "with your edits" in flash((await browser.get("/inbox")).text)
    d = await wait_status(api, sid, "toolu_d")
    assert d["status"] == "denied" and d["reason"] == "not at 3 a.m."
    e = await wait_status(api, sid, "toolu_e")
    assert e["status"] == "succeeded" and e["decision"] == "allow_with_edits"
    assert (api.workspace / "e.txt").read_text() == "edited\n"


async def test_two_approvers_race_from_their_inboxes(api: ApiRig) -> None:
    second, _ = await api.repo.create_api_key("second-approver", roles=["approver"])
    sid = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    rid = await park(api, sid, "toolu_race")
    async with browser_for(api) as one, browser_for(api) as two:
        assert (await login(one, api.human_key)).status_code == 303
        assert (await login(two, second)).status_code == 303
        p1, p2 = await asyncio.gather(one.get("/inbox"), two.get("/inbox"))
        assert rid in items(p1.text) and rid in items(p2.text)
        r1, r2 = await asyncio.gather(
            one.post("/inbox/decide", data={"csrf": form_csrf(p1.text), "request_id": rid,
                                            "decision": "allow"}),
            two.post("/inbox/decide", data={"csrf": form_csrf(p2.text), "request_id": rid,
                                            "decision": "deny"}),
        )
        assert r1.status_code == r2.status_code == 303
        f1 = flash((await one.get("/inbox")).text)
        f2 = flash((await two.get("/inbox")).text)
    stored = await api.repo.get_approval(rid)
    assert stored is not None and stored.decision in ("allow", "deny")
    winner, loser_flash = (f1, f2) if stored.decision == "allow" else (f2, f1)
    assert winner.startswith("You ")
    assert loser_flash.startswith(f"Already decided by {stored.decided_by}: "), loser_flash
    done = await wait_status(api, sid, "toolu_race")
    assert done["status"] == ("succeeded" if stored.decision == "allow" else "denied")
    assert done["decided_by"] == stored.decided_by


NAMED_POLICY = {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"]},
                          {"tool": "shell", "mode": "prompt"}]}
PEOPLE: dict[str, Any] = {"approvers": {"alice": {"email": "alice@example.com",
                                                  "key": "alice-key"},
                                        "bob": {}}}


async def test_personal_inbox_link(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=NAMED_POLICY,
                       **PEOPLE) as api:
        alice_key, _ = await api.repo.create_api_key("alice-key", roles=["approver"])
        sid = await api.register()
        (api.workspace / "n.txt").write_text("old\n")
        await api.submit(sid, "write_file", {"path": "n.txt", "content": "new\n"},
                         call_id="toolu_n")
        await api.submit(sid, "shell", {"command": "echo hi"}, call_id="toolu_s")
        for _ in range(400):
            row = await api.repo.get_call(sid, "toolu_n")
            srow = await api.repo.get_call(sid, "toolu_s")
            if row is not None and row.request_id and srow is not None and srow.request_id:
                break
            await asyncio.sleep(0.05)
        assert row is not None and row.request_id and srow is not None and srow.request_id
        named, plain = row.request_id, srow.request_id
        secret = api.app.state.secret
        alice = f"/inbox/p/{sign_inbox_token(secret, 'alice')}"
        bob = f"/inbox/p/{sign_inbox_token(secret, 'bob')}"
        async with browser_for(api) as browser:
            assert (await browser.get(alice[:-2] + "xx")).status_code == 403
            stranger = f"/inbox/p/{sign_inbox_token(secret, 'mallory')}"
            assert (await browser.get(stranger)).status_code == 403
            assert items((await browser.get(bob)).text) == []
            page = await browser.get(alice)
            assert page.status_code == 200 and page.headers["referrer-policy"] == "no-referrer"
            assert items(page.text) == [named]
            assert items((await browser.get(alice, params={"project": "default"})).text) == [
                named]
            assert items((await browser.get(alice, params={"project": "elsewhere"})).text) == []
            # A key that is not mapped to alice does not see her request.
        async with browser_for(api) as human:
            assert (await login(human, api.human_key)).status_code == 303
            listed = items((await human.get("/inbox")).text)
            assert plain in listed and named not in listed
        async with browser_for(api) as mapped:
            assert (await login(mapped, alice_key)).status_code == 303
            listed = items((await mapped.get("/inbox")).text)
            assert named in listed and plain in listed
        async with browser_for(api) as browser:
            r = await decide(browser, named, "allow", action=alice, page_url=alice)
            assert r.status_code == 303 and r.headers["location"] == alice
            assert "You approved write_file" in flash((await browser.get(alice)).text)
        done = await wait_status(api, sid, "toolu_n")
        assert done["status"] == "succeeded" and done["decided_by"] == "alice"
        assert done["principal_id"] == "approver:alice" and done["via"] == "inbox"


async def test_stream_tells_the_page_when_calls_park_and_are_decided(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock), browser_for(api, base) as browser:
        sid = await api.register()
        (api.workspace / "f.txt").write_text("old\n")
        assert (await login(browser, api.human_key)).status_code == 303
        seen: list[dict[str, Any]] = []
        changed = asyncio.Event()

        async def listen() -> None:
            async with browser.stream("GET", "/inbox/stream") as resp:
                assert resp.status_code == 200
                assert resp.headers["content-type"].startswith("text/event-stream")
                buf = ""
                async for chunk in resp.aiter_text():
                    buf += chunk.replace("\r\n", "\n")
                    while "\n\n" in buf:
                        block, buf = buf.split("\n\n", 1)
                        data = [ln[5:].strip() for ln in block.split("\n")
                                if ln.startswith("data:")]
                        if data:
                            seen.append(json.loads(data[0]))
                            changed.set()

        async def next_event(pred: Any, after: int = -1) -> tuple[int, dict[str, Any]]:
            """The first event after index `after` that matches, and its index."""
            while True:
                for i, ev in enumerate(seen):
                    if i > after and pred(ev):
                        return i, ev
                changed.clear()
                await asyncio.wait_for(changed.wait(), 20)

        task = asyncio.create_task(listen())
        try:
            at, start = await next_event(lambda ev: True)
            rid = await park(api, sid, "toolu_live")
            at, parked = await next_event(lambda ev: rid in ev["request_ids"], at)
            assert parked["sig"] != start["sig"] and parked["count"] == start["count"] + 1
            r = await decide(browser, rid, "allow")
            assert r.status_code == 303
            _, gone = await next_event(lambda ev: rid not in ev["request_ids"], at)
            assert gone["count"] == parked["count"] - 1
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # The page's list fragment (what the script swaps in) follows the same set.
        part = await browser.get("/inbox", params={"partial": "1"})
        assert part.status_code == 200 and 'id="items"' in part.text and "<html" not in part.text


async def test_expired_and_cancelled_requests_leave_the_inbox(api: ApiRig) -> None:
    from datetime import timedelta

    from parkgate.calls.records import ApprovalRecord
    from parkgate.models import utcnow

    sid = await api.register()
    (api.workspace / "f.txt").write_text("old\n")
    cancelled = await park(api, sid, "toolu_c")
    live = await park(api, sid, "toolu_l", path="l.txt")
    r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_c/cancel",
                            headers={"Authorization": f"Bearer {api.key}"})
    assert r.status_code in (200, 202), r.text
    done = await wait_status(api, sid, "toolu_c")
    assert done["status"] == "cancelled"
    # A request whose expiry has passed (the workflow's timer records it a
    # moment later) is not offered any more.
    now = utcnow()
    stale = ApprovalRecord(request_id="req-stale", session_id=sid, turn_id="t1",
                           tool_use_id="toolu_stale", tool_name="write_file", token_hash="x",
                           input_hash="y", requested_at=now - timedelta(hours=2),
                           expires_at=now - timedelta(seconds=1),
                           info={"side_effects": "write", "rule": "r"})
    await api.repo.save_approval(stale)
    async with browser_for(api) as browser:
        assert (await login(browser, api.human_key)).status_code == 303
        listed = items((await browser.get("/inbox")).text)
        assert live in listed and cancelled not in listed and "req-stale" not in listed
        page = await browser.get("/inbox")
        r = await browser.post("/inbox/decide", data={
            "csrf": form_csrf(page.text), "request_id": "req-stale", "decision": "allow"})
        assert "is not waiting for you" in flash((await browser.get(r.headers["location"])).text)
