"""Issue 28 (7): Slack clicks, personal approval links and personal inbox links
decide only requests of the approver's projects (`approvers.<name>.projects`).

Before, a named approver configured for one project decided another project's
parked calls from Slack or through their personal links, since rules (and the
approvers they name) are deployment-wide.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.approvals.links import sign_inbox_token
from parkgate.store.repository import Repository
from tests.api.fake_slack import BOT_TOKEN, CHANNEL, SIGNING_SECRET, FakeSlack
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import csrf_of
from tests.api.test_inbox import browser_for, flash, form_csrf, items
from tests.api.test_slack import click, wait_for

NAMED = {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": ["alice", "bob"]}]}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _request_id(api: ApiRig, sid: str, call_id: str) -> str:
    """The request id of a parked call (named requests have no generic link)."""
    for _ in range(400):
        row = await api.repo.get_call(sid, call_id)
        if row is not None and row.request_id:
            return row.request_id
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id} never parked")


class Payments:
    """A second project's agent, reader and admin keys, with its own workspace."""

    def __init__(self, api: ApiRig, tmp_path: Path) -> None:
        self.api = api
        self.workspace = tmp_path / "payments-ws"
        self.workspace.mkdir()

    async def keys(self) -> Payments:
        repo = self.api.repo
        self.agent, _ = await repo.create_api_key("pay-agent", project="payments",
                                                  roles=["agent"])
        self.admin, _ = await repo.create_api_key("pay-admin", project="payments",
                                                  roles=["admin", "auditor"])
        return self

    async def park(self, sid: str, call_id: str, path: str) -> dict[str, Any]:
        http = self.api.http
        r = await http.post("/v1/sessions", headers=bearer(self.agent), json={
            "session_id": sid, "workspace_path": str(self.workspace)})
        assert r.status_code in (200, 201), r.text
        r = await http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=bearer(self.agent),
                            json={"id": call_id, "name": "write_file",
                                  "input": {"path": path, "content": "paid\n"}})
        assert r.status_code == 202, r.text
        for _ in range(400):
            body = (await self.get(sid, call_id)).json()
            if body.get("status") == "parked" and body.get("request_id"):
                return dict(body)
            await asyncio.sleep(0.05)
        raise AssertionError(f"never parked: {body}")

    async def get(self, sid: str, call_id: str, **params: Any) -> httpx.Response:
        return await self.api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}",
                                       headers=bearer(self.admin), params=params)

    async def assert_undecided(self, sid: str, call_id: str, path: str) -> None:
        """Nothing decided, nothing ran, and the audit names nobody."""
        body = (await self.get(sid, call_id)).json()
        assert body["status"] == "parked", body
        assert (body["decided_by"], body["principal_id"], body["claimed_name"]) == (
            None, None, None)
        approval = await self.api.repo.get_approval(body["request_id"])
        assert approval is not None and approval.decision is None
        assert approval.decided_by is None and approval.principal_id is None
        events = await self.api.repo.call_events(sid, call_id)
        assert [e.type for e in events] == ["tool.confirmation_requested"]
        assert not (self.workspace / path).exists()


async def test_slack_clicks_decide_only_the_approvers_projects(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path],
        slack_bot_token=BOT_TOKEN, slack_signing_secret=SIGNING_SECRET,
        slack_channel=CHANNEL, slack_api_url=fake.api_url,
        approvers={"alice": {"slack_user_id": "U0ALICE"},  # project default (the default)
                   "bob": {"slack_user_id": "U0BOB", "projects": ["payments"]}},
    ) as api:
        pay = await Payments(api, tmp_path).keys()
        await pay.park("s-pay-slack", "toolu_pay", "pay.txt")  # WRITE prompts: no named approvers
        [message] = await wait_for(lambda: fake.posted())
        ts = str(message["ts"])
        r = await click(api, fake, ts, "U0ALICE", "parkgate_approve")
        assert r.status_code == 200 and r.json()["ok"] is False, r.text
        assert "does not approve for" in r.json()["text"]
        assert "payments" not in r.json()["text"]  # which project is not said
        reply = await wait_for(lambda: [e for e in fake.ephemeral
                                        if "does not approve for" in e["text"]])
        assert reply[0]["response_type"] == "ephemeral"
        await pay.assert_undecided("s-pay-slack", "toolu_pay", "pay.txt")
        # Bob approves for payments: his click decides, as bob.
        r = await click(api, fake, ts, "U0BOB", "parkgate_approve")
        assert r.json()["ok"] is True, r.text
        done = (await pay.get("s-pay-slack", "toolu_pay", wait=20)).json()
        assert done["status"] == "succeeded", done
        assert (done["decided_by"], done["principal_id"], done["via"]) == (
            "bob", "approver:bob", "slack")
        assert (pay.workspace / "pay.txt").read_text() == "paid\n"


async def test_personal_links_decide_only_the_approvers_projects(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(
        dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path], policy=NAMED,
        approvers={"alice": {}, "bob": {"projects": ["default", "payments"]}},
    ) as api:
        pay = await Payments(api, tmp_path).keys()
        parked = await pay.park("s-pay-links", "toolu_pay", "pay.txt")
        for _ in range(400):
            links = (await pay.get("s-pay-links", "toolu_pay")).json().get("approver_links")
            if links:
                break
            await asyncio.sleep(0.05)
        assert sorted(links) == ["alice", "bob"]
        # Alice's personal approval link: neither the page nor a POST reach the call.
        path = links["alice"].removeprefix(api.base_url)
        async with browser_for(api) as browser:
            page = await browser.get(path)
            assert page.status_code == 403 and "does not approve for" in page.text
            assert "pay.txt" not in page.text  # the arguments are not shown either
            posted = await browser.post(path, data={"csrf": "x", "decision": "allow"})
            assert posted.status_code == 403 and "does not approve for" in posted.text
        await pay.assert_undecided("s-pay-links", "toolu_pay", "pay.txt")
        # Alice's personal inbox: the payments request is not listed, nor decidable.
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "own.txt", "content": "own\n"},
                         call_id="toolu_own")
        own = await _request_id(api, sid, "toolu_own")
        inbox = f"/inbox/p/{sign_inbox_token(api.app.state.secret, 'alice')}"
        async with browser_for(api) as browser:
            page = await browser.get(inbox)
            assert items(page.text) == [own]
            assert items((await browser.get(inbox, params={"project": "payments"})).text) == []
            r = await browser.post(inbox, data={
                "csrf": form_csrf(page.text), "request_id": parked["request_id"],
                "decision": "allow"})
            assert r.status_code == 303
            assert "is not waiting for you" in flash((await browser.get(inbox)).text)
        await pay.assert_undecided("s-pay-links", "toolu_pay", "pay.txt")
        # Bob approves for payments: his link decides, as bob.
        path = links["bob"].removeprefix(api.base_url)
        async with browser_for(api) as browser:
            page = await browser.get(path)
            assert page.status_code == 200, page.text
            r = await browser.post(path, data={"csrf": csrf_of(page.text), "decision": "allow"})
            assert r.status_code == 200, r.text
        done = (await pay.get("s-pay-links", "toolu_pay", wait=20)).json()
        assert done["status"] == "succeeded", done
        assert (done["decided_by"], done["principal_id"]) == ("bob", "approver:bob")
