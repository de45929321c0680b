"""Large values end to end through the real HTTP API (issue 13): a 1 MiB input and a
10 MB output, on SQLite and PostgreSQL, with every Temporal payload small."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from parkgate.durable.payloads import call_workflow_id, turn_workflow_id
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import login
from tests.fixtures.temporal import AUTO_ALL, with_blobs

MiB = 1024 * 1024
#: No event of a large call's history may come near Temporal's 2 MiB payload limit.
HISTORY_EVENT_LIMIT = 128 * 1024


@pytest.fixture
async def big(dev_temporal: Client, repo: Repository, tmp_path: Path) -> AsyncIterator[ApiRig]:
    """The app and a worker whose large payloads travel by reference (both backends)."""
    async with api_rig(with_blobs(dev_temporal, repo), repo, tmp_path, policy=AUTO_ALL) as rig:
        yield rig


async def largest_event(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return max(event.ByteSize() for event in history.events)


def one_mib_content() -> str:
    """Content that makes the write_file input exactly max_input_bytes (1 MiB) of JSON."""
    overhead = len('{"path":"big.txt","content":""}')
    return ("0123456789abcdef" * (MiB // 16))[: MiB - overhead]


async def test_one_mib_write_file_end_to_end(big: ApiRig) -> None:
    sid = await big.register()
    content = one_mib_content()
    cid = f"toolu_{uuid.uuid4().hex[:10]}"
    r = await big.submit(sid, "write_file", {"path": "big.txt", "content": content},
                         call_id=cid, wait=60)
    assert r.status_code == 200, r.text[:500]
    body = r.json()
    assert body["status"] == "succeeded", body
    assert (big.workspace / "big.txt").read_text() == content
    # The input is in the history store whole, and Temporal only saw references.
    record = await big.repo.get_call(sid, cid)
    assert record is not None and record.input == {"path": "big.txt", "content": content}
    assert await largest_event(big.rig.client, call_workflow_id(sid, cid)) < HISTORY_EVENT_LIMIT
    # Stored once: the content is one blob, however many payloads carried it.
    assert len(await big.repo.blob_ids()) == 1
    # The Temporal UI's codec endpoint resolves the reference: the whole input shows.
    history = await big.rig.client.get_workflow_handle(call_workflow_id(sid, cid)).fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads
    wire = [{"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
             "data": base64.b64encode(p.data).decode()} for p in started]
    admin, _ = await big.repo.create_api_key("codec-admin", roles=["admin"])
    decoded = await big.http.post("/codec/decode", json={"payloads": wire},
                                  headers={"Authorization": f"Bearer {admin}"})
    assert decoded.status_code == 200, decoded.text[:300]
    [plain] = decoded.json()["payloads"]
    assert json.loads(base64.b64decode(plain["data"]))["call"]["input"]["content"] == content


async def test_ten_mb_output_is_truncated_for_the_model_and_downloadable(big: ApiRig) -> None:
    sid = await big.register()
    line = "the quick brown fox jumps over the lazy dog 0123456789\n"
    text = line * (10_000_000 // len(line) + 1)
    (big.workspace / "huge.log").write_text(text)
    cid = f"toolu_{uuid.uuid4().hex[:10]}"
    r = await big.submit(sid, "read_file", {"path": "huge.log"}, call_id=cid, wait=60)
    assert r.status_code == 200, r.text[:500]
    result = r.json()["result"]
    shown = "".join(b.get("text", "") for b in result["content"])
    assert len(shown) < 20_000 and "[truncated:" in shown
    download = await big.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}/output")
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/plain")
    assert hashlib.sha256(download.content).hexdigest() == hashlib.sha256(
        text.encode()).hexdigest()
    as_json = await big.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}/output",
                                 params={"format": "json"})
    assert as_json.status_code == 200 and as_json.json()["metadata"]["content"] == text
    # The audit page of the call links the same download (auditor's browser session).
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=big.app),
                                 base_url=big.base_url) as browser:
        assert (await login(big, browser, big.human_key)).status_code == 303
        listing = await browser.get("/audit", params={"session_id": sid})
        page = re.search(r'href="(/audit/calls/\d+)"', listing.text)
        assert page
        detail = await browser.get(page.group(1))
        assert f'href="{page.group(1)}/output"' in detail.text
        full = await browser.get(f"{page.group(1)}/output")
        assert full.status_code == 200 and full.content == download.content
    assert await largest_event(big.rig.client, call_workflow_id(sid, cid)) < HISTORY_EVENT_LIMIT


async def test_output_download_needs_the_call_and_a_key(big: ApiRig) -> None:
    sid = await big.register()
    missing = await big.http.get(f"/v1/sessions/{sid}/tool-calls/nope/output")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    anonymous = await big.http.get(f"/v1/sessions/{sid}/tool-calls/nope/output",
                                   headers={"authorization": ""})
    assert anonymous.status_code == 401


async def test_batch_of_large_results_does_not_wedge_the_turn(big: ApiRig) -> None:
    """45 results of ~48 KB (the model's cap per result) in one turn: together over
    Temporal's 2 MiB payload limit; the turn's outcome travels by reference."""
    sid = await big.register()
    (big.workspace / "chunk.txt").write_text("z" * 60_000)
    calls = [{"id": f"toolu_{uuid.uuid4().hex[:10]}", "name": "shell",
              "input": {"command": f"cat chunk.txt && echo {i}"}} for i in range(45)]
    r = await big.http.post(f"/v1/sessions/{sid}/turns/t-big/tool-calls:batch",
                            params={"wait": 60}, json={"calls": calls})
    assert r.status_code == 200, r.text[:500]
    results = r.json()["calls"]
    assert [c["status"] for c in results] == ["succeeded"] * 45, [  # why any failed
        (c["status"], c.get("error_class"), str(c.get("result"))[:300])
        for c in results if c["status"] != "succeeded"]
    assert len(r.content) > 2 * MiB
    turn_id = (await big.rig.client.list_workflows(
        f"WorkflowId STARTS_WITH '{turn_workflow_id(sid, '')}'").__anext__()).id
    assert await largest_event(big.rig.client, turn_id) < HISTORY_EVENT_LIMIT
    last = await big.http.get(f"/v1/sessions/{sid}/tool-calls/{calls[-1]['id']}/output")
    assert last.text == "z" * 60_000 + "44\n"


@pytest.fixture
async def gated(dev_temporal: Client, repo: Repository, tmp_path: Path) -> AsyncIterator[ApiRig]:
    """Writes park for a human (the default policy); large payloads by reference."""
    async with api_rig(with_blobs(dev_temporal, repo), repo, tmp_path) as rig:
        yield rig


async def test_approve_with_one_mib_of_edits(gated: ApiRig) -> None:
    sid = await gated.register()
    cid = f"toolu_{uuid.uuid4().hex[:10]}"
    r = await gated.submit(sid, "write_file", {"path": "e.txt", "content": "draft"},
                           call_id=cid)
    assert r.status_code in (200, 202), r.text
    parked = await gated.wait_parked(sid, cid)
    url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
    deep: dict[str, object] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    refused = await gated.http.post(url, json={"decision": "allow_with_edits",
                                               "edited_input": deep})
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "input_too_deep"
    content = one_mib_content().replace("big.txt", "e.txt")[: MiB - 40]
    r = await gated.http.post(url, json={
        "decision": "allow_with_edits",
        "edited_input": {"path": "e.txt", "content": content},
    })
    assert r.status_code == 200, r.text[:500]
    done = await gated.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 30})
    assert done.json()["status"] == "succeeded", done.text[:500]
    assert (gated.workspace / "e.txt").read_text() == content
    assert await largest_event(gated.rig.client, call_workflow_id(sid, cid)) < HISTORY_EVENT_LIMIT
