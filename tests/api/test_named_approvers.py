"""Named approvers and quorum over HTTP: personal links (webhook, admins), the
page's tally, single use, API decisions by keys mapped to approvers."""

from __future__ import annotations

import asyncio
import html
import re
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, WebhookSink, api_rig
from tests.api.test_audit_pages import csrf_of

POLICY = {"rules": [{"tool": "write_file", "mode": "prompt",
                     "approvers": ["group:oncall"], "quorum": 2}]}
PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {"email": "alice@example.com"},
                  "bob": {"email": "bob@example.com", "key": "bob-key"},
                  "carol": {}},
    "approver_groups": {"oncall": ["alice", "bob", "carol"]},
}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def parked_for_admin(api: ApiRig, sid: str, call_id: str, admin: str) -> dict[str, Any]:
    for _ in range(400):
        body = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}",
                                   headers=bearer(admin))).json()
        if body.get("status") == "parked" and body.get("approver_links"):
            return dict(body)
        await asyncio.sleep(0.05)
    raise AssertionError(f"never parked: {body}")


async def post_link(api: ApiRig, link: str, decision: str = "allow") -> httpx.Response:
    path = link.removeprefix(api.base_url)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        page = await browser.get(path)
        assert page.status_code == 200, page.text
        return await browser.post(path, data={"csrf": csrf_of(page.text),
                                              "decision": decision})


async def test_two_named_approvers_run_the_call(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with WebhookSink().running() as sink, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=POLICY,
        webhooks=[{"url": sink.url, "kind": "generic"}], **PEOPLE,
    ) as api:
        admin, _ = await api.repo.create_api_key("admin-key", roles=["admin"])
        bob, bob_rec = await api.repo.create_api_key("bob-key", roles=["approver"])
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "k.txt", "content": "k"}, call_id="toolu_k")
        parked = await parked_for_admin(api, sid, "toolu_k", admin)
        links = parked["approver_links"]
        assert sorted(links) == ["alice", "bob", "carol"]
        assert (parked["approvers"], parked["quorum"], parked["votes"]) == (
            ["alice", "bob", "carol"], 2, [])
        # Nobody else sees personal links; no generic link decides a named request.
        for key in (api.key, api.human_key, bob):
            view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k",
                                       headers=bearer(key))).json()
            assert view["approver_links"] is None and view["approval_url"] is None
        # The webhook lists every named approver with their own link.
        for _ in range(200):
            if sink.received:
                break
            await asyncio.sleep(0.05)
        body = sink.received[0]["body"]
        assert body["quorum"] == 2
        assert [(a["name"], a["email"], a["approval_url"]) for a in body["approvers"]] == [
            ("alice", "alice@example.com", links["alice"]),
            ("bob", "bob@example.com", links["bob"]),
            ("carol", None, links["carol"]),
        ]

        # The generic link shows the request but cannot decide it.
        rid = parked["request_id"]
        generic = await api.repo.get_approval(rid)
        assert generic is not None
        from parkgate.api.shared.approval_links import link_for

        generic_link = link_for(api.rig.settings, api.rig.settings.signing_secret(), generic)
        assert generic_link is not None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            page = await browser.get(generic_link.removeprefix(api.base_url))
            assert 'data-testid="personal-only"' in page.text and 'name="csrf"' not in page.text

        # Alice approves through her link: counted, the call still waits.
        alice = links["alice"].removeprefix(api.base_url)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as browser:
            form = {"csrf": csrf_of((await browser.get(alice)).text), "decision": "allow"}
            first = await browser.post(alice, data=form)
            assert first.status_code == 202 and "1 of 2" in first.text, first.text
            assert not (api.workspace / "k.txt").exists()
            # Her link is single use: no form any more, and a replayed POST is refused.
            used = await browser.get(alice)
            assert 'data-testid="used"' in used.text and 'name="csrf"' not in used.text
            again = await browser.post(alice, data=form)
            assert again.status_code == 409 and "already approved" in again.text
        # Carol's page shows who has approved so far.
        carol_page = await api.http.get(links["carol"].removeprefix(api.base_url),
                                        headers={"Authorization": ""})
        assert "Approved so far: alice (1 of 2)" in html.unescape(carol_page.text)
        assert "Deciding as <strong>carol</strong>" in carol_page.text
        # A tampered personal link is refused, and so is a validly signed link
        # for someone who is not a named approver of this request.
        token = links["carol"].rsplit("/", 1)[1]
        forged = token.replace(token[:10], "A" * 10, 1)
        assert (await api.http.get(f"/approve/{forged}")).status_code == 403
        from parkgate.approvals.links import sign_personal_token

        mallory = sign_personal_token(api.rig.settings.signing_secret(), rid,
                                      generic.expires_at, "mallory")
        assert (await api.http.get(f"/approve/{mallory}")).status_code == 403

        # Bob decides through the API with the key mapped to him: quorum met.
        won = await api.http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
                                  headers=bearer(bob), json={"decision": "allow"})
        assert won.status_code == 200, won.text
        decision = won.json()["decision"]
        assert decision["votes"] == ["alice", "bob"]
        assert decision["principal_id"] == f"key:{bob_rec.id}"
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_k",
                                   params={"wait": 20})).json()
        assert done["status"] == "succeeded", done
        assert (api.workspace / "k.txt").read_text() == "k"
        stored = await api.repo.get_approval(rid)
        assert stored is not None and stored.votes == ["alice", "bob"]


async def test_an_unmapped_approver_key_cannot_decide_a_named_request(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, policy=POLICY, **PEOPLE) as api:
        admin, _ = await api.repo.create_api_key("admin-key", roles=["admin"])
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "u.txt", "content": "u"}, call_id="toolu_u")
        parked = await parked_for_admin(api, sid, "toolu_u", admin)
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow"})
        assert r.status_code == 403
        assert "named approvers: alice, bob, carol" in r.json()["error"]["message"]
        # One approval, then a deny from another named approver: denied.
        links = parked["approver_links"]
        assert (await post_link(api, links["carol"])).status_code == 202
        denied = await post_link(api, links["alice"], "deny")
        assert denied.status_code == 200 and "denied" in denied.text.lower()
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_u",
                                   params={"wait": 20})).json()
        assert done["status"] == "denied"
        assert done["principal_id"] == "approver:alice" and done["decided_by"] == "alice"
        assert re.search(r"carol", str(done.get("votes") or ""))


Tap = tuple[httpx.AsyncClient, str, dict[str, str]]


async def _armed_tap(api: ApiRig, link: str, decision: str) -> Tap:
    """A phone that has loaded its approver's page and is about to tap."""
    browser = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                base_url=api.base_url)
    path = link.removeprefix(api.base_url)
    page = await browser.get(path)
    assert page.status_code == 200, page.text
    return browser, path, {"csrf": csrf_of(page.text), "decision": decision}


async def _until_answered(post: Any, url: str, **kw: Any) -> httpx.Response:
    """A person's tap: sent again, as they would, while the answer is an honest
    503 "retry shortly" (on a loaded machine an update can find no worker to
    accept it in time); any other answer is final."""
    for _ in range(20):
        answer: httpx.Response = await post(url, **kw)
        if answer.status_code != 503:
            return answer
        await asyncio.sleep(0.5)
    return answer


async def test_concurrent_named_approvers_leave_one_consistent_truth(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    """Three named approvers (quorum 2) tap their links at the same moment, each
    twice (a double tap), while bob also answers through his API key; in odd
    rounds carol denies. Whatever the interleaving: exactly one answer says it
    decided, the stored decision, its principal and the counted votes are those
    the humans were told, and the file exists exactly when the call was allowed."""
    async with api_rig(dev_temporal, pg_repo, tmp_path, policy=POLICY, **PEOPLE) as api:
        admin, _ = await api.repo.create_api_key("admin-key", roles=["admin"])
        bob_key, bob_rec = await api.repo.create_api_key("bob-key", roles=["approver"])
        sid = await api.register()
        for round_no in range(4):
            call_id = f"toolu_race{round_no}"
            target = f"race{round_no}.txt"
            await api.submit(sid, "write_file", {"path": target, "content": "r"},
                             call_id=call_id)
            parked = await parked_for_admin(api, sid, call_id, admin)
            rid, links = parked["request_id"], parked["approver_links"]
            carol_says = "deny" if round_no % 2 else "allow"
            plan = [("alice", "allow"), ("bob", "allow"), ("carol", carol_says)] * 2
            taps = [await _armed_tap(api, links[who], how) for who, how in plan]
            try:
                link_posts = [_until_answered(browser.post, path, data=form)
                              for browser, path, form in taps]
                api_post = _until_answered(
                    api.http.post, f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
                    headers=bearer(bob_key), json={"decision": "allow"})
                answers = await asyncio.gather(*link_posts, api_post)
            finally:
                for browser, _path, _form in taps:
                    await browser.aclose()
            who_said = [*[f"approver:{who}" for who, _ in plan], f"key:{bob_rec.id}"]
            codes = [a.status_code for a in answers]
            assert set(codes) <= {200, 202, 409}, codes
            deciders = [p for p, code in zip(who_said, codes, strict=True) if code == 200]
            assert len(deciders) == 1, (round_no, codes)

            done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}",
                                       params={"wait": 30})).json()
            stored = await api.repo.get_approval(rid)
            assert stored is not None and stored.decision in ("allow", "deny")
            assert stored.principal_id == deciders[0], (round_no, stored, codes)
            assert done["principal_id"] == deciders[0]
            counted = {p for p, code in zip(who_said, codes, strict=True) if code == 202}
            # bob counts once however he answered (link or key).
            names = {p.removeprefix("approver:") if p.startswith("approver:") else "bob"
                     for p in counted}
            assert set(stored.votes or []) >= names, (round_no, stored.votes, codes)
            if stored.decision == "allow":
                assert done["status"] == "succeeded", done
                assert (api.workspace / target).read_text() == "r"
                assert len(set(stored.votes or [])) == 2
            else:
                assert carol_says == "deny" and deciders[0] == "approver:carol"
                assert done["status"] == "denied", done
                assert not (api.workspace / target).exists()
            events = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}/events",
                                         headers=bearer(admin))).json()
            resolved = [e for e in events["events"]
                        if e["type"] == "tool.confirmation_resolved"]
            assert len(resolved) == 1
            assert resolved[0]["data"]["decision"] == stored.decision
