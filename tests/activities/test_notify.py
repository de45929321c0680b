"""`parkgate.notify` against real HTTP receivers: retries resend only what failed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from parkgate.activities.notify import NotifyActivities
from parkgate.settings.entries import Webhook
from tests.api.rig import WebhookSink, closed_port_url
from tests.channels.test_webhook import notice
from tests.fixtures.temporal import make_settings


async def test_delivers_to_every_webhook(tmp_path: Path) -> None:
    async with WebhookSink().running() as slack, WebhookSink().running() as plain:
        settings = make_settings(tmp_path, tmp_path, webhooks=[
            Webhook(url=slack.url, kind="slack"),
            Webhook(url=plain.url, headers={"X-Token": "abc"}),
        ])
        out = await ActivityEnvironment().run(NotifyActivities(settings).notify, notice())
        assert out.delivered == 2 and out.failed == 0
        assert slack.received[0]["body"]["blocks"]
        assert plain.received[0]["body"]["event"] == "tool.confirmation_requested"
        assert plain.received[0]["headers"]["x-token"] == "abc"


async def test_failure_raises_for_retry_and_retry_skips_delivered(tmp_path: Path) -> None:
    async with WebhookSink().running() as good, WebhookSink(fail_first=1).running() as flaky:
        settings = make_settings(tmp_path, tmp_path, webhooks=[
            Webhook(url=good.url), Webhook(url=flaky.url), Webhook(url=closed_port_url()),
        ])
        acts = NotifyActivities(settings, timeout=2)
        env = ActivityEnvironment()
        beats: list[Any] = []
        env.on_heartbeat = lambda *details: beats.append(details)
        with pytest.raises(ApplicationError) as info:
            await env.run(acts.notify, notice())
        assert "webhook[1]" in str(info.value) and "webhook[2]" in str(info.value)
        assert "HTTP 503" in str(info.value) and "unreachable" in str(info.value)
        assert beats[-1] == ([0],)
        # The retry gets the last heartbeat: only the failed targets are tried.
        settings.webhooks[2] = Webhook(url=good.url)
        retry = ActivityEnvironment()
        retry.info = dataclasses.replace(retry.info, heartbeat_details=[[0]])
        out = await retry.run(acts.notify, notice())
        assert out.delivered == 3
        assert len(good.received) == 2  # once for [0], once for the replaced [2]
        assert len(flaky.received) == 1 and flaky.attempts == 2


async def test_no_webhooks_is_a_no_op(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, tmp_path)
    out = await ActivityEnvironment().run(NotifyActivities(settings).notify, notice())
    assert out.delivered == 0 and out.failed == 0


async def test_escalation_without_named_approvers_sends_the_generic_link(
    tmp_path: Path,
) -> None:
    """A request any approver decides: the escalation people get its generic
    link (a personal link would decide nothing); the first notice names nobody."""
    async with WebhookSink().running() as sink:
        settings = make_settings(tmp_path, tmp_path, webhooks=[Webhook(url=sink.url)],
                                 approvers={"dave": {}, "erin": {}})
        base = notice()
        info = base.info.model_copy(update={"escalate_to": ["dave", "erin"],
                                            "escalate_after_seconds": 60})
        first = base.model_copy(update={"info": info})
        escalated = first.model_copy(update={"kind": "escalation"})
        acts = NotifyActivities(settings)
        await ActivityEnvironment().run(acts.notify, first)
        await ActivityEnvironment().run(acts.notify, escalated)
    request, escalation = (r["body"] for r in sink.received)
    assert "approvers" not in request and "notice" not in request
    assert escalation["notice"] == "escalation"
    assert [(a["name"], a["approval_url"]) for a in escalation["approvers"]] == [
        ("dave", base.approval_url), ("erin", base.approval_url)]
