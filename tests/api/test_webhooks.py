"""A parked call notifies the configured webhooks; a dead webhook never holds the call."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import WebhookSink, api_rig, closed_port_url


async def test_parked_call_notifies_and_dead_webhook_does_not_block(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with WebhookSink().running() as sink, api_rig(
        dev_temporal, sqlite_repo, tmp_path,
        webhooks=[{"url": closed_port_url(), "kind": "generic"},
                  {"url": sink.url, "kind": "slack"}],
    ) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "n.txt", "content": "n"}, call_id="toolu_n")
        parked = await api.wait_parked(sid, "toolu_n")
        for _ in range(200):
            if sink.received:
                break
            await asyncio.sleep(0.05)
        assert sink.received, "slack webhook never called"
        body = sink.received[0]["body"]
        assert parked["approval_url"] in body["text"]
        # The other webhook is dead; the call is decidable and completes anyway.
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow"},
        )
        assert r.status_code == 200
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_n", params={"wait": 20})
        assert done.json()["status"] == "succeeded"
        assert (api.workspace / "n.txt").read_text() == "n"
