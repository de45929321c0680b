"""Sign-in with a real OpenID provider (oidc-provider-mock on a local port):
the code flow with PKCE, state and nonce; decisions that record the
provider's identity and `audit verify` checking it; refusals (replayed state,
foreign state, wrong nonce, expired, tampered, wrong audience, unknown
issuer); a removed group losing the right at the next decision; forwarded
personal links deciding nothing when sign-in is required; two signed-in
people racing on one request."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from sqlalchemy import update
from temporalio.client import Client

from parkgate.api.shared import oidc_sessions
from parkgate.approvals.links import sign_inbox_token
from parkgate.store.repository import Repository
from parkgate.store.statements import APPROVALS
from tests.api.rig import ApiRig, api_rig
from tests.api.test_inbox import browser_for, decide, flash, form_csrf, items, park, wait_status
from tests.fixtures.oidc import IdP, expired_idp, running_idp, sign_in

ALICE = {"email": "alice@example.com", "email_verified": True, "name": "Alice",
         "groups": ["approvers"]}
BOB = {"email": "bob@example.com", "email_verified": True, "name": "Bob",
       "groups": ["approvers"]}


def id_token(idp: IdP, sub: str, *, client_id: str = "parkgate") -> str:
    """An ID token straight from the provider (code flow without the app)."""
    query = urlencode({"client_id": client_id, "response_type": "code", "scope": "openid email",
                       "redirect_uri": "http://client.test/cb", "nonce": "n-1", "state": "s"})
    back = idp.authorize(f"{idp.issuer}/oauth2/authorize?{query}", sub)
    code = dict(parse_qsl(urlsplit(back).query))["code"]
    r = httpx.post(f"{idp.issuer}/oauth2/token", auth=(client_id, "x"), data={
        "grant_type": "authorization_code", "code": code,
        "redirect_uri": "http://client.test/cb"})
    assert r.status_code == 200, r.text
    return str(r.json()["id_token"])


def bearer_client(api: ApiRig, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url=api.base_url,
                             headers={"Authorization": f"Bearer {token}"}, timeout=60)


def aged(api: ApiRig, client: httpx.AsyncClient, seconds: int) -> None:
    """The session cookie as if the provider asserted its claims `seconds` ago."""
    secret = api.app.state.secret
    raw = client.cookies.get(oidc_sessions.COOKIE)
    assert raw
    data = URLSafeTimedSerializer(secret, salt=oidc_sessions.SALT).loads(raw)

    class Earlier(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - seconds

    old = URLSafeTimedSerializer(secret, salt=oidc_sessions.SALT, signer=Earlier).dumps(data)
    (cookie,) = [c for c in client.cookies.jar if c.name == oidc_sessions.COOKIE]
    client.cookies.set(oidc_sessions.COOKIE, old, domain=cookie.domain, path=cookie.path)


async def test_sign_in_decide_audit_and_verify(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, **idp.settings()) as api:
            sid = await api.register()
            (api.workspace / "f.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_o1")
            async with browser_for(api) as browser:
                # Without a session the inbox offers the provider's sign-in.
                login = await browser.get("/inbox", follow_redirects=True)
                assert 'data-testid="oidc-signin"' in login.text
                done = await sign_in(browser, idp, "alice-sub")
                assert done.status_code == 303 and done.headers["location"] == "/inbox"
                cookie = done.headers["set-cookie"]
                assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Max-Age" in cookie
                page = await browser.get("/inbox")
                assert page.status_code == 200 and rid in items(page.text)
                assert "/auth/signout" in page.text and "alice@example.com" in page.text
                r = await decide(browser, rid, "allow")
                assert r.status_code == 303
                assert flash((await browser.get("/inbox")).text).startswith("You approved")
                call = await wait_status(api, sid, "toolu_o1")
                assert call["status"] == "succeeded"
                assert call["decided_by"] == "alice@example.com"
                assert call["principal_id"] == "oidc:alice-sub"
                assert call["identity"] == {"method": "oidc", "issuer": idp.issuer,
                                            "subject": "alice-sub",
                                            "email": "alice@example.com"}
                # The audit pages (auditor through the same group) name the identity.
                listing = await browser.get("/audit")
                assert listing.status_code == 200 and sid in listing.text
                assert "alice@example.com" in listing.text
                row = await api.repo.get_call(sid, "toolu_o1")
                assert row is not None and row.identity == call["identity"]
                calls = await api.repo.list_calls(None, limit=10)  # type: ignore[arg-type]
                numeric = next(c.id for c in calls.items if c.tool_use_id == "toolu_o1")
                detail = await browser.get(f"/audit/calls/{numeric}")
                assert f"signed in via {idp.issuer} as alice@example.com (sub alice-sub)" in \
                    detail.text
                # Sign out: the button's form ends the session.
                token = form_value(page.text, "/auth/signout")
                out = await browser.post("/auth/signout", data={"csrf": token})
                assert out.status_code == 200 and "Signed out" in out.text
                assert (await browser.get("/inbox")).status_code == 303
            # verify: the identity is consistent; a changed one is reported.
            assert (await api.repo.verify_meaning()).problems == []
            async with api.repo.engine.begin() as conn:
                await conn.execute(update(APPROVALS).where(APPROVALS.c.request_id == rid).values(
                    identity={"method": "oidc", "issuer": idp.issuer, "subject": "mallory",
                              "email": "mallory@example.com"}))
            found = [p.detail for p in (await api.repo.verify_meaning()).problems]
            assert any("approval row says signed in via" in d and "mallory" in d
                       for d in found), found


def form_value(page: str, action: str) -> str:
    import html
    import re

    match = re.search(rf'action="{re.escape(action)}"[^>]*><input type="hidden" name="csrf" '
                      r'value="([^"]+)"', page)
    assert match, page[:2000]
    return html.unescape(match.group(1))


async def test_callback_refusals_and_bearer_tokens(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp, running_idp() as stranger:
        idp.set_user("alice-sub", ALICE)
        idp.set_user("nogroup", {"email": "n@example.com", "groups": []})
        stranger.set_user("alice-sub", ALICE)
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, **idp.settings()) as api:
            async with browser_for(api) as browser, browser_for(api) as other:
                start = await browser.get("/auth/oidc/login", params={"next": "/inbox"})
                back = urlsplit(idp.authorize(start.headers["location"], "alice-sub"))
                callback = f"{back.path}?{back.query}"
                # Another browser (no pending sign-in cookie) cannot use the answer.
                foreign = await other.get(callback)
                assert foreign.status_code == 400 and "started in this browser" in foreign.text
                assert (await browser.get(callback)).status_code == 303
                # The same answer again: a replayed state.
                replay = await browser.get(callback)
                assert replay.status_code == 400 and "already used" in replay.text
                # The nonce the ID token carries must be the one this sign-in sent.
                start = await other.get("/auth/oidc/login", params={"next": "/inbox"})
                url = urlsplit(start.headers["location"])
                query = dict(parse_qsl(url.query)) | {"nonce": "forged"}
                back = urlsplit(idp.authorize(urlunsplit(url._replace(query=urlencode(query))),
                                              "alice-sub"))
                wrong = await other.get(f"{back.path}?{back.query}")
                assert wrong.status_code == 401 and "nonce does not match" in wrong.text
                assert oidc_sessions.COOKIE not in other.cookies
                # An open redirect through `next` is not possible.
                start = await other.get("/auth/oidc/login",
                                        params={"next": "https://evil.test/"})
                back = urlsplit(idp.authorize(start.headers["location"], "alice-sub"))
                landed = await other.get(f"{back.path}?{back.query}")
                assert landed.headers["location"] == "/inbox"
            # Bearer tokens from the provider act as the person on the API.
            sid = await api.register()
            (api.workspace / "b.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_b1", path="b.txt")
            good = id_token(idp, "alice-sub")
            async with bearer_client(api, good) as alice:
                listed = await alice.get("/v1/tool-calls")
                assert listed.status_code == 200, listed.text
                r = await alice.post(f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
                                     json={"decision": "deny", "reason": "not today"})
                assert r.status_code == 200, r.text
            call = await wait_status(api, sid, "toolu_b1")
            assert call["status"] == "denied" and call["principal_id"] == "oidc:alice-sub"
            assert call["identity"]["method"] == "oidc" and call["via"] == "api"
            header, payload, signature = good.split(".")
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            claims["sub"] = "mallory"
            forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
            refusals = {
                "signature does not verify": f"{header}.{forged}.{signature}",
                "another audience": id_token(idp, "alice-sub", client_id="someone-else"),
                "not the configured issuer": id_token(stranger, "alice-sub"),
            }
            for why, token in refusals.items():
                async with bearer_client(api, token) as client:
                    r = await client.get("/v1/tool-calls")
                assert r.status_code == 401 and why in r.json()["error"]["message"], r.text
            async with bearer_client(api, id_token(idp, "nogroup")) as client:
                r = await client.get("/v1/tool-calls")
            assert r.status_code == 403 and "lacks the auditor role" in r.text
            assert (await api.repo.verify_meaning()).problems == []


async def test_expired_tokens_are_refused(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with expired_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, **idp.settings()) as api:
            async with browser_for(api) as browser:
                r = await sign_in(browser, idp, "alice-sub")
                assert r.status_code == 401 and "has expired" in r.text
                assert oidc_sessions.COOKIE not in browser.cookies
            async with bearer_client(api, id_token(idp, "alice-sub")) as client:
                r = await client.get("/v1/tool-calls")
            assert r.status_code == 401 and "has expired" in r.json()["error"]["message"]


async def test_a_removed_group_loses_the_right_at_the_next_decision(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, **idp.settings()) as api:
            sid = await api.register()
            (api.workspace / "f.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_g1")
            async with browser_for(api) as browser:
                assert (await sign_in(browser, idp, "alice-sub")).status_code == 303
                page = await browser.get("/inbox")
                assert rid in items(page.text)
                # Alice leaves the approvers group at the provider; an hour passes.
                idp.set_user("alice-sub", ALICE | {"groups": []})
                aged(api, browser, 3600)
                r = await browser.post("/inbox/decide", data={
                    "csrf": form_csrf(page.text), "request_id": rid, "decision": "allow"})
                # Too old to decide with: renewed through the provider first.
                assert r.status_code == 401 and "Confirm it is you" in r.text
                start = await browser.get(signin_link(r.text))
                assert start.status_code == 303
                back = urlsplit(idp.authorize(start.headers["location"], "alice-sub"))
                assert (await browser.get(f"{back.path}?{back.query}")).status_code == 303
                refused = await browser.get("/inbox")
                assert refused.status_code == 403 and "no approver role" in refused.text
                again = await browser.post("/inbox/decide", data={
                    "csrf": form_csrf(page.text), "request_id": rid, "decision": "allow"})
                assert again.status_code == 403 and "no approver role" in again.text
            stored = await api.repo.get_approval(rid)
            assert stored is not None and stored.decision is None


NAMED = {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice"]},
                   {"tool": "shell", "mode": "prompt"}]}


async def test_forwarded_personal_link_decides_nothing_when_sign_in_is_required(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        idp.set_user("bob-sub", BOB)
        settings: dict[str, Any] = idp.settings(
            link_decisions="signin", api_key_signin=False,
            approvers={"alice": {"email": "alice@example.com"}, "bob": {}})
        async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=NAMED,
                           **settings) as api:
            sid = await api.register()
            (api.workspace / "n.txt").write_text("old\n")
            await api.submit(sid, "write_file", {"path": "n.txt", "content": "new\n"},
                             call_id="toolu_n1")
            rid = await request_of(api, sid, "toolu_n1")
            await api.submit(sid, "shell", {"command": "echo hi"}, call_id="toolu_s1")
            generic = (await api.wait_parked(sid, "toolu_s1"))["approval_url"]
            link = f"/inbox/p/{sign_inbox_token(api.app.state.secret, 'alice')}"
            async with browser_for(api) as nobody:
                # With the key form off, the pages go straight to the provider.
                r = await nobody.get("/inbox")
                assert r.status_code == 303
                assert r.headers["location"] == "/auth/oidc/login?next=%2Finbox"
                r = await nobody.get("/audit")
                assert r.headers["location"] == "/auth/oidc/login?next=%2Faudit"
                assert (await nobody.post("/inbox/login", data={})).status_code == 403
                r = await nobody.get(link)
                assert r.status_code == 401 and "belongs to alice" in r.text
                path = generic.removeprefix(api.base_url)
                page = await nobody.get(path)
                assert page.status_code == 200  # GET only shows
                r = await nobody.post(path, data={"csrf": _csrf(page.text), "decision": "allow",
                                                  "approver": "alice"})
                assert r.status_code == 401 and "Nothing was decided" in r.text
            async with browser_for(api) as bob:
                assert (await sign_in(bob, idp, "bob-sub")).status_code == 303
                r = await bob.get(link)
                assert r.status_code == 403 and "forwarded link decides nothing" in r.text
                r = await bob.post(link, data={"csrf": "x", "request_id": rid,
                                               "decision": "allow"})
                assert r.status_code == 403
                assert rid not in items((await bob.get("/inbox")).text)  # not named
            assert (await api.repo.get_approval(rid)).decision is None  # type: ignore[union-attr]
            async with browser_for(api) as alice:
                assert (await sign_in(alice, idp, "alice-sub")).status_code == 303
                r = await decide(alice, rid, "allow", action=link, page_url=link)
                assert r.status_code == 303
                # The generic link of another call, with her sign-in: she decides as herself.
                page = await alice.get(path)
                assert "Deciding as <strong>alice@example.com</strong> (signed in)" in page.text
                assert 'data-testid="signout"' in page.text
                r = await alice.post(path, data={"csrf": _csrf_decide(page.text),
                                                 "decision": "deny", "reason": "no"})
                assert r.status_code == 200, r.text
            shell = await wait_status(api, sid, "toolu_s1")
            assert shell["status"] == "denied" and shell["decided_by"] == "alice@example.com"
            assert shell["identity"] == {"method": "oidc", "issuer": idp.issuer,
                                         "subject": "alice-sub", "email": "alice@example.com",
                                         "link": "generic"}
            call = await wait_status(api, sid, "toolu_n1")
            assert call["status"] == "succeeded" and call["decided_by"] == "alice"
            assert call["identity"] == {"method": "oidc", "issuer": idp.issuer,
                                        "subject": "alice-sub", "email": "alice@example.com",
                                        "link": "personal", "approver": "alice"}
            assert (await api.repo.verify_meaning()).problems == []


def signin_link(page: str) -> str:
    import html
    import re

    match = re.search(r'href="([^"]+)" data-testid="signin-link"', page)
    assert match, page[:2000]
    return html.unescape(match.group(1))


async def request_of(api: ApiRig, sid: str, call_id: str) -> str:
    for _ in range(400):
        row = await api.repo.get_call(sid, call_id)
        if row is not None and row.request_id:
            return row.request_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id} never parked")


def _csrf_decide(page: str) -> str:
    import html
    import re

    match = re.search(r'class="decide">\s*<input type="hidden" name="csrf" value="([^"]+)"',
                      page)
    assert match, page[:2000]
    return html.unescape(match.group(1))


def _csrf(page: str) -> str:
    from tests.api.test_audit_pages import csrf_of

    return csrf_of(page)


async def test_two_signed_in_people_race_on_one_request(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        idp.set_user("bob-sub", BOB)
        async with api_rig(dev_temporal, pg_repo, tmp_path, **idp.settings()) as api:
            sid = await api.register()
            (api.workspace / "f.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_r1")
            async with browser_for(api) as one, browser_for(api) as two:
                assert (await sign_in(one, idp, "alice-sub")).status_code == 303
                assert (await sign_in(two, idp, "bob-sub")).status_code == 303
                p1, p2 = await asyncio.gather(one.get("/inbox"), two.get("/inbox"))
                r1, r2 = await asyncio.gather(
                    one.post("/inbox/decide", data={"csrf": form_csrf(p1.text),
                                                    "request_id": rid, "decision": "allow"}),
                    two.post("/inbox/decide", data={"csrf": form_csrf(p2.text),
                                                    "request_id": rid, "decision": "deny"}),
                )
                assert r1.status_code == r2.status_code == 303
                f1 = flash((await one.get("/inbox")).text)
                f2 = flash((await two.get("/inbox")).text)
            stored = await api.repo.get_approval(rid)
            assert stored is not None and stored.decision in ("allow", "deny")
            winner, loser = (f1, f2) if stored.decision == "allow" else (f2, f1)
            assert winner.startswith("You ")
            assert loser.startswith(f"Already decided by {stored.decided_by}: "), loser
            assert stored.decided_by in ("alice@example.com", "bob@example.com")
            assert stored.identity is not None and stored.identity["subject"] in (
                "alice-sub", "bob-sub")
            assert (await api.repo.verify_meaning()).problems == []
