"""Slack approvals end to end on the durable path: the real slack-sdk against a
local HTTP server that answers as Slack's Web API (tests/api/fake_slack.py), and
interactivity requests signed exactly as Slack signs them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from temporalio.client import Client

from parkgate.api.shared.approval_links import personal_link
from parkgate.store.repository import Repository
from tests.api.fake_slack import (
    BOT_TOKEN,
    CHANNEL,
    SIGNING_SECRET,
    FakeSlack,
    signed,
    signed_raw,
)
from tests.api.rig import ApiRig, api_rig, cancelled_activities
from tests.api.test_named_approvers import post_link

PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {"slack_user_id": "U0ALICE"},
                  "bob": {"slack_user_id": "U0BOB"},
                  "carol": {"slack_user_id": "U0CAROL"}},
}


def slack_settings(fake: FakeSlack) -> dict[str, Any]:
    return {"slack_bot_token": BOT_TOKEN, "slack_signing_secret": SIGNING_SECRET,
            "slack_channel": CHANNEL, "slack_api_url": fake.api_url, **PEOPLE}


def policy(approvers: list[str], quorum: int = 1) -> dict[str, Any]:
    return {"rules": [{"tool": "write_file", "mode": "prompt", "approvers": approvers,
                       "quorum": quorum}]}


async def wait_for(predicate: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := predicate()):
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)
    return value


def context_text(message: dict[str, Any]) -> str:
    return " ".join(e["text"] for b in message["blocks"] if b["type"] == "context"
                    for e in b["elements"])


def has_buttons(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message["blocks"])


async def click(api: ApiRig, fake: FakeSlack, ts: str, user: str, action: str) -> httpx.Response:
    body, headers = signed(fake.click(ts, user, action))
    return await api.http.post("/slack/interactivity", content=body,
                               headers={**headers, "Authorization": ""})


async def park(api: ApiRig, fake: FakeSlack, call_id: str, path: str) -> tuple[str, str]:
    """Submit a write that parks; return (session id, the Slack message ts)."""
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": path, "content": "from slack\n"},
                     call_id=call_id)
    message = await wait_for(lambda: fake.posted())
    assert len(fake.posted()) == 1
    return sid, str(message[0]["ts"])


async def test_signature_is_checked_before_anything(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_sig", "sig.txt")
        payload = fake.click(ts, "U0ALICE", "parkgate_approve")
        body, headers = signed(payload)
        no_key = {"Authorization": ""}
        cases = {
            "unsigned": ({"Content-Type": headers["Content-Type"]}, "missing"),
            "wrong secret": (signed(payload, secret="not-the-secret")[1], "does not match"),
            "stale": (signed(payload, timestamp=int(time.time()) - 301)[1], "5-minute window"),
            "future": (signed(payload, timestamp=int(time.time()) + 600)[1], "5-minute window"),
            "tampered": ({**headers, "X-Slack-Signature": headers["X-Slack-Signature"][:-2]
                          + "00"}, "does not match"),
            "bad ts": ({**headers, "X-Slack-Request-Timestamp": "soon"}, "not a number"),
        }
        for name, (hdrs, text) in cases.items():
            # the stale/future bodies were signed with their own timestamps: send those
            data = body if name not in ("wrong secret",) else signed(
                payload, secret="not-the-secret")[0]
            if name in ("stale", "future"):
                data = signed(payload, timestamp=int(hdrs["X-Slack-Request-Timestamp"]))[0]
            r = await api.http.post("/slack/interactivity", content=data,
                                    headers={**hdrs, **no_key})
            assert r.status_code == 401, (name, r.status_code, r.text)
            assert text in r.json()["error"]["message"], (name, r.text)
        # Signed, but the body is not Slack's shape: 400 with a message.
        bad_body, bad_headers = signed_raw(b"payload=%7Bnot-json")
        r = await api.http.post("/slack/interactivity", content=bad_body,
                                headers={**bad_headers, **no_key})
        assert r.status_code == 400 and "payload" in r.json()["error"]["message"]
        # Signed payloads of the wrong shape are 400s with a message, never 500s.
        for odd in ({"type": "view_submission"}, {"type": "block_actions", "actions": "x"},
                    {"type": "block_actions", "actions": [{"action_id": "parkgate_approve",
                                                           "value": "r"}], "user": "U0ALICE"},
                    {**payload, "channel": 5, "container": [], "message": None,
                     "actions": [{"action_id": "nope", "value": 1}]}, [1, 2]):
            odd_body, odd_headers = signed(odd)  # type: ignore[arg-type]
            r = await api.http.post("/slack/interactivity", content=odd_body,
                                    headers={**odd_headers, **no_key})
            assert r.status_code == 400, (odd, r.text)
            assert r.json()["error"]["message"], r.text
        # Nothing was decided by any of it.
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_sig")).json()
        assert view["status"] == "parked" and view["decision"] is None
        # The valid request decides.
        r = await api.http.post("/slack/interactivity", content=body,
                                headers={**headers, **no_key})
        assert r.status_code == 200 and r.json()["ok"] is True, r.text


async def test_quorum_through_slack_refuses_strangers_and_runs_the_call(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice", "bob"], 2),
        **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_q", "q.txt")
        message = fake.messages[(CHANNEL, ts)]
        assert "write_file" in message["text"] and sid in message["text"]
        assert "+from slack" in str(message["blocks"])  # the diff
        assert "0 of 2 approvals" in context_text(message)

        # A Slack user mapped to no approver, and one who is not named on this call.
        for user, why in (("U0NOBODY", "not mapped"), ("U0CAROL", "named approvers")):
            r = await click(api, fake, ts, user, "parkgate_approve")
            assert r.status_code == 200 and r.json()["ok"] is False, r.text
            assert why in r.json()["text"]
            reply = await wait_for(lambda why=why: [e for e in fake.ephemeral
                                                    if why in e["text"]])
            assert reply[0]["response_type"] == "ephemeral"
            assert reply[0]["replace_original"] is False
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_q")).json()
        assert view["status"] == "parked" and view["votes"] == []

        r = await click(api, fake, ts, "U0ALICE", "parkgate_approve")
        assert r.json() == {"ok": True, "text": r.json()["text"]} and "1 of 2" in r.json()["text"]
        # The message shows the tally (updated after the answer, Slack's 3-second rule).
        await wait_for(lambda: "1 of 2 approvals: alice" in context_text(
            fake.messages[(CHANNEL, ts)]))
        assert has_buttons(fake.messages[(CHANNEL, ts)])
        assert not (api.workspace / "q.txt").exists()
        # Clicking again does not count twice.
        again = await click(api, fake, ts, "U0ALICE", "parkgate_approve")
        assert again.json()["ok"] is False and "already approved" in again.json()["text"]

        r = await click(api, fake, ts, "U0BOB", "parkgate_approve")
        assert r.json()["ok"] is True, r.text
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_q",
                                   params={"wait": 20})).json()
        assert done["status"] == "succeeded", done
        assert (api.workspace / "q.txt").read_text() == "from slack\n"
        approval = await api.repo.get_approval(done["request_id"])
        assert approval is not None
        assert (approval.decided_by, approval.via, approval.principal_id, approval.votes) == (
            "bob", "slack", "approver:bob", ["alice", "bob"])
        # The call's end shows the outcome on the message (SlackOutcome workflow).
        final = await wait_for(lambda: "succeeded" in context_text(
            fake.messages[(CHANNEL, ts)]) and fake.messages[(CHANNEL, ts)])
        assert context_text(final) == "Approved by bob via slack; the call ran and succeeded."
        assert not has_buttons(final)


async def test_deny_through_slack(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_d", "d.txt")
        r = await click(api, fake, ts, "U0ALICE", "parkgate_deny")
        assert r.json()["ok"] is True, r.text
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d",
                                   params={"wait": 20})).json()
        assert done["status"] == "denied", done
        assert done["error_class"] == "user_denied"
        assert not (api.workspace / "d.txt").exists()
        final = await wait_for(lambda: "did not run" in context_text(
            fake.messages[(CHANNEL, ts)]) and fake.messages[(CHANNEL, ts)])
        assert context_text(final) == "Denied by alice via slack; the call did not run."
        scrape = (await api.http.get("/metrics")).text
        assert 'parkgate_approval_latency_seconds_count{decision="deny",via="slack"}' in scrape
        assert not has_buttons(final)


async def test_message_shows_a_decision_made_elsewhere(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_e", "e.txt")
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_e")).json()
        approval = await api.repo.get_approval(view["request_id"])
        assert approval is not None
        link = personal_link(api.rig.settings, api.rig.settings.signing_secret(), approval,
                             "alice")
        assert (await post_link(api, link)).status_code == 200
        final = await wait_for(lambda: "succeeded" in context_text(
            fake.messages[(CHANNEL, ts)]) and fake.messages[(CHANNEL, ts)])
        assert context_text(final) == "Approved by alice via link; the call ran and succeeded."
        assert not has_buttons(final)
        # A click on the (stale) button afterwards decides nothing and says why.
        r = await click(api, fake, ts, "U0ALICE", "parkgate_deny")
        assert r.json()["ok"] is False and "no longer waiting" in r.json()["text"]
        assert (api.workspace / "e.txt").read_text() == "from slack\n"


async def test_message_shows_expiry(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), approval_expiry_seconds=2,
        **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_x", "x.txt")
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_x",
                                   params={"wait": 20})).json()
        assert done["status"] == "expired", done
        final = await wait_for(lambda: "Expired" in context_text(
            fake.messages[(CHANNEL, ts)]) and fake.messages[(CHANNEL, ts)])
        assert context_text(final).startswith("Expired: no decision arrived")
        assert not has_buttons(final)
        r = await click(api, fake, ts, "U0ALICE", "parkgate_approve")
        assert r.json()["ok"] is False and "no longer waiting" in r.json()["text"]
        assert not (api.workspace / "x.txt").exists()


async def test_slack_refusing_the_bot_never_blocks_the_call(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """chat.postMessage fails (invalid_auth) and is retried; the call is decided
    through a personal link meanwhile and runs."""
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]),
        **{**slack_settings(fake), "slack_bot_token": "xoxb-revoked"},
    ) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "z.txt", "content": "z"}, call_id="toolu_z")
        await wait_for(lambda: fake.attempts.get("chat.postMessage", 0) >= 1)
        assert fake.posted() == []
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_z")).json()
        approval = await api.repo.get_approval(view["request_id"])
        assert approval is not None
        link = personal_link(api.rig.settings, api.rig.settings.signing_secret(), approval,
                             "alice")
        assert (await post_link(api, link)).status_code == 200
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_z",
                                   params={"wait": 20})).json()
        assert done["status"] == "succeeded", done
        assert fake.posted() == []
        # The post still being retried was cancelled when the call ended.
        assert "parkgate.slack_post" in await cancelled_activities(api.rig.client, sid,
                                                                   "toolu_z")


async def test_an_approver_does_not_approve_their_own_agents_call(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Separation of duties: alice's API key submitted the call, so alice's click
    decides nothing (the rule does not allow self-approval); bob's does."""
    people = {"approvers": {"alice": {"slack_user_id": "U0ALICE", "key": "alice-agent"},
                            "bob": {"slack_user_id": "U0BOB"}}}
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice", "bob"]),
        **{**slack_settings(fake), **people},
    ) as api:
        alice_key, _ = await api.repo.create_api_key("alice-agent", roles=["agent", "auditor"])
        sid = await api.register()
        r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                                headers={"Authorization": f"Bearer {alice_key}"},
                                json={"id": "toolu_self", "name": "write_file",
                                      "input": {"path": "self.txt", "content": "s"}})
        assert r.status_code in (200, 201, 202), r.text
        messages = await wait_for(lambda: fake.posted())
        ts = str(messages[0]["ts"])
        refused = await click(api, fake, ts, "U0ALICE", "parkgate_approve")
        assert refused.json()["ok"] is False
        assert "separation of duties" in refused.json()["text"]
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self")).json()
        assert view["status"] == "parked" and view["decision"] is None
        assert (await click(api, fake, ts, "U0BOB", "parkgate_approve")).json()["ok"] is True
        done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_self",
                                   params={"wait": 20})).json()
        assert done["status"] == "succeeded", done
        assert done["decided_by"] == "bob"


async def test_message_shows_a_cancellation(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with FakeSlack().running() as fake, api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), **slack_settings(fake),
    ) as api:
        sid, ts = await park(api, fake, "toolu_c", "c.txt")
        r = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_c/cancel")
        assert r.status_code in (200, 202), r.text
        final = await wait_for(lambda: "Cancelled" in context_text(
            fake.messages[(CHANNEL, ts)]) and fake.messages[(CHANNEL, ts)])
        assert context_text(final) == "Cancelled before anyone decided; the call did not run."
        assert not has_buttons(final)


async def test_a_message_posted_after_the_call_ended_shows_the_outcome(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Slack is slow: the call is decided and ends while chat.postMessage is in
    flight, so the workflow cancels the post and never learns the message; the
    post activity reads the ended call from the store and shows its outcome."""
    fake = FakeSlack()
    fake.hold_posts = asyncio.Event()
    async with fake.running(), api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=policy(["alice"]), **slack_settings(fake),
    ) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "slow.txt", "content": "s"},
                         call_id="toolu_slow")
        await wait_for(lambda: fake.attempts.get("chat.postMessage", 0) >= 1)
        view = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_slow")).json()
        approval = await api.repo.get_approval(view["request_id"])
        assert approval is not None
        link = personal_link(api.rig.settings, api.rig.settings.signing_secret(), approval,
                             "alice")
        assert (await post_link(api, link)).status_code == 200
        assert "parkgate.slack_post" in await cancelled_activities(api.rig.client, sid,
                                                                   "toolu_slow")
        assert fake.posted() == []
        fake.hold_posts.set()  # Slack answers now
        message = await wait_for(lambda: [m for m in fake.posted()
                                          if "succeeded" in context_text(m)])
        assert context_text(message[0]) == (
            "Approved by alice via link; the call ran and succeeded.")
        assert not has_buttons(message[0])
