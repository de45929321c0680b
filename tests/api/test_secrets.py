"""Secrets stay out of reach: tool environment, Temporal history, codec endpoint,
metrics labels and token, audit logout CSRF (issue 15)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from parkgate.durable.codec import EncryptionCodec
from parkgate.durable.payloads import call_workflow_id
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, WebhookSink, api_rig
from tests.api.test_audit_pages import csrf_of, login
from tests.fixtures.required import needs_sandbox
from tests.fixtures.temporal import TEST_CONVERTER, TEST_PAYLOAD_KEYS, replayer

UI_ORIGIN = "http://127.0.0.1:8233"
PAYLOAD_KEY_FILE = "ZmlsZS1wYXlsb2FkLWtleS0zMi1ieXRlcy1sb25nISEhIQ=="


async def approved_result(api: ApiRig, sid: str, call_id: str) -> dict[str, Any]:
    parked = await api.wait_parked(sid, call_id)
    ok = await api.http.post(
        f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
        json={"decision": "allow", "decided_by": "alice"},
    )
    assert ok.status_code == 200, ok.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}", params={"wait": 30})
    body = done.json()
    assert body["status"] == "succeeded", body
    return dict(body)


async def test_an_approved_shell_call_sees_no_secret_in_its_environment(
    api: ApiRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a real server process has in its environment.
    monkeypatch.setenv("PARKGATE_LINK_SECRET", "leak-link-secret-0001")
    monkeypatch.setenv("PARKGATE_TEMPORAL_API_KEY", "leak-temporal-key-0002")
    monkeypatch.setenv("PARKGATE_PAYLOAD_KEYS", '{"k": "leak-payload-key-0003"}')
    monkeypatch.setenv("TEMPORAL_API_KEY", "leak-temporal-key-0004")
    sid = await api.register()
    await api.submit(sid, "shell", {"command": "env; echo HOME=$HOME"}, call_id="toolu_env")
    body = await approved_result(api, sid, "toolu_env")
    out = body["result"]["content"][0]["text"]
    assert "PATH=" in out  # the command did run and print its environment
    for secret in ("leak-link-secret-0001", "leak-temporal-key-0002", "leak-payload-key-0003",
                   "leak-temporal-key-0004", api.rig.settings.link_secret or "-",
                   *TEST_PAYLOAD_KEYS.values(), "PARKGATE_"):
        assert secret not in out
    assert f"HOME={api.workspace}" in out
    assert str(api.rig.settings.data_dir) not in out


def between(text: str, start: str, end: str) -> str:
    """What the command printed between two marker lines."""
    return text.split(f"{start}\n", 1)[1].split(f"{end}", 1)[0]


@needs_sandbox
async def test_an_approved_shell_call_cannot_read_the_data_directory(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    # Issue 15 deliverable 1: the worker and the tool run as the same user, so only
    # the sandbox stands between `cat` and the link secret, payload key and databases.
    hidden = tmp_path / "ops-secrets"
    hidden.mkdir()
    (hidden / "vault-token").write_text("vault-token-9c2e")
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, link_secret=None,
                       tool_hidden_paths=[hidden]) as api:
        data = api.rig.settings.data_dir
        link_secret = api.rig.settings.signing_secret()  # generated into data/link-secret
        (data / "payload-key").write_text(PAYLOAD_KEY_FILE)
        (data / "temporal.db").write_text("temporal-history-rows")
        files = sorted(p.name for p in data.iterdir())
        assert "link-secret" in files and (data / "link-secret").read_text() == link_secret
        sid = await api.register()
        command = (
            f"env; cat {data}/link-secret {data}/payload-key {data}/temporal.db; "
            f"echo ==ls==; ls -A {data}; echo ==hidden==; ls -A {hidden}; echo ==ws==; "
            "echo kept > kept.txt && cat kept.txt; echo ==end=="
        )
        await api.submit(sid, "shell", {"command": command}, call_id="toolu_dd")
        body = await approved_result(api, sid, "toolu_dd")
        out = body["result"]["content"][0]["text"]
        assert "PATH=" in out  # the command ran
        for secret in (link_secret, PAYLOAD_KEY_FILE, *TEST_PAYLOAD_KEYS.values(),
                       "temporal-history-rows", "vault-token-9c2e"):
            assert secret not in out
        assert between(out, "==ls==", "==hidden==").strip() == ""  # no file of the data dir
        for name in files:
            assert f"\n{name}\n" not in out
        assert between(out, "==hidden==", "==ws==").strip() == ""  # tool_hidden_paths
        assert between(out, "==ws==", "==end==").strip() == "kept"
        assert (api.workspace / "kept.txt").read_text() == "kept\n"


async def test_required_sandbox_unavailable_is_an_error_result_for_the_model(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, tool_sandbox="required",
                       tool_sandbox_unshare="/nonexistent/unshare") as api:
        sid = await api.register()
        await api.submit(sid, "shell", {"command": "echo ran > ran.txt"}, call_id="toolu_req")
        parked = await api.wait_parked(sid, "toolu_req")
        ok = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}",
            json={"decision": "allow", "decided_by": "alice"},
        )
        assert ok.status_code == 200, ok.text
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_req",
                                  params={"wait": 30})
        body = done.json()
        assert done.status_code == 200 and body["status"] == "failed", body
        assert body["result"]["is_error"] is True
        text = body["result"]["content"][0]["text"]
        assert "sandbox could not be set up" in text and "was not run" in text
        assert not (api.workspace / "ran.txt").exists()


async def test_history_holds_ciphertext_and_the_codec_endpoint_decodes_it(
    api: ApiRig,
) -> None:
    sid = await api.register()
    marker = "sk-live-marker-7f3a"
    await api.submit(sid, "write_file", {"path": "k.txt", "content": marker}, call_id="toolu_k")
    await approved_result(api, sid, "toolu_k")
    handle = api.rig.client.get_workflow_handle(call_workflow_id(sid, "toolu_k"))
    history = await handle.fetch_history()  # raw events: what the Temporal server stores
    raw = history.to_json()
    b64 = base64.b64encode(marker.encode()).decode()[:16]
    assert marker not in raw and b64 not in raw
    assert "binary/encrypted" in raw or base64.b64encode(b"binary/encrypted").decode() in raw
    # The replayer (same converter) reads the encrypted history.
    replay = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None, replay.replay_failure
    payloads = [
        {"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
         "data": base64.b64encode(p.data).decode()}
        for event in history.events
        if event.HasField("workflow_execution_started_event_attributes")
        for p in event.workflow_execution_started_event_attributes.input.payloads
    ]
    assert payloads
    admin, _ = await api.repo.create_api_key("codec-admin", roles=["admin"])
    h = {"Authorization": f"Bearer {admin}"}
    r = await api.http.post("/codec/decode", json={"payloads": payloads}, headers=h)
    assert r.status_code == 200, r.text
    decoded = b"".join(base64.b64decode(p["data"]) for p in r.json()["payloads"])
    assert marker.encode() in decoded
    # encode -> decode round-trips through the endpoint, too.
    plain = {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
             "data": base64.b64encode(b'"hello"').decode()}
    enc = await api.http.post("/codec/encode", json={"payloads": [plain]}, headers=h)
    assert enc.status_code == 200 and enc.json()["payloads"][0]["data"] != plain["data"]
    dec = await api.http.post("/codec/decode", json=enc.json(), headers=h)
    assert dec.json()["payloads"] == [plain]


async def test_codec_endpoint_needs_auth_and_answers_cors_for_the_ui_origin(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, codec_cors_origin=UI_ORIGIN) as api:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                     base_url=api.base_url) as anon:
            r = await anon.post("/codec/decode", json={"payloads": []})
            assert r.status_code == 401
            pre = await anon.options("/codec/decode", headers={
                "Origin": UI_ORIGIN, "Access-Control-Request-Method": "POST"})
            assert pre.status_code == 204
            assert pre.headers["access-control-allow-origin"] == UI_ORIGIN
            assert "X-Namespace" in pre.headers["access-control-allow-headers"]
            other = await anon.options("/codec/decode", headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
            assert "access-control-allow-origin" not in other.headers
            # An admin's audit session (what the UI sends with credentials) is accepted.
            admin, _ = await api.repo.create_api_key("ui-admin", roles=["admin", "auditor"])
            assert (await login(api, anon, admin)).status_code == 303
            ok = await anon.post("/codec/decode", json={"payloads": []},
                                 headers={"Origin": UI_ORIGIN})
            assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == UI_ORIGIN
        h = {"Authorization": f"Bearer {admin}"}
        bad = await api.http.post("/codec/decode", headers=h, json={"payloads": [
            {"metadata": {"encoding": base64.b64encode(b"binary/encrypted").decode(),
                          "encryption-key-id": base64.b64encode(b"nope").decode()},
             "data": base64.b64encode(b"x" * 40).decode()}]})
        assert bad.status_code == 422 and "unknown key id 'nope'" in bad.text
        junk = await api.http.post("/codec/decode", content=b"not json", headers=h)
        assert junk.status_code == 400


async def test_bogus_tool_names_do_not_grow_metric_series(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, metrics_token="m-token") as api:
        sid = await api.register()
        for i in range(20):
            await api.submit(sid, f"bogus_tool_{i}", {}, call_id=f"toolu_b{i}", wait=10)
        await api.submit(sid, "list_dir", {"path": "."}, call_id="toolu_ok", wait=10)
        assert (await api.http.get("/metrics")).status_code == 401  # API key is not enough
        r = await api.http.get("/metrics", headers={"Authorization": "Bearer m-token"})
        assert r.status_code == 200
        assert "bogus_tool" not in r.text
        assert 'parkgate_api_tool_calls_submitted_total{tool="unknown"}' in r.text
        assert 'parkgate_api_tool_calls_submitted_total{tool="list_dir"}' in r.text


async def test_audit_logout_needs_csrf(api: ApiRig) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, api.key)).status_code == 303
        forged = await browser.post("/audit/logout", data={})
        assert forged.status_code == 403
        assert (await browser.get("/audit")).status_code == 200  # still signed in
        page = await browser.get("/audit")
        out = await browser.post("/audit/logout", data={"csrf": csrf_of(page.text)})
        assert out.status_code == 303 and out.headers["location"].endswith("/audit/login")
        assert (await browser.get("/audit")).status_code == 303


def history_plaintext(history_json: str) -> str:
    """Every payload of a history, decrypted with the test key, as one text."""
    codec = TEST_CONVERTER.payload_codec
    assert isinstance(codec, EncryptionCodec)
    texts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "data" in node and isinstance(node.get("metadata"), dict):
                payload = Payload(
                    metadata={k: base64.b64decode(v) for k, v in node["metadata"].items()},
                    data=base64.b64decode(node["data"]),
                )
                texts.append(codec.decrypt(payload).data.decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(history_json))
    return "\n".join(texts)


async def test_approval_tokens_never_reach_workflow_history(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    sink = WebhookSink()
    async with sink.running() as hook, api_rig(
        dev_temporal, sqlite_repo, tmp_path, webhooks=[{"url": hook.url}]
    ) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "t.txt", "content": "t"}, call_id="toolu_t")
        parked = await api.wait_parked(sid, "toolu_t")
        token = parked["approval_url"].rsplit("/", 1)[1]
        # The link still works everywhere it is read: API, status query, webhook.
        view = await api.rig.dispatcher.status(sid, "toolu_t")
        assert view.approval_url == parked["approval_url"]
        for _ in range(200):
            if hook.received:
                break
            await asyncio.sleep(0.05)
        assert hook.received[0]["body"]["approval_url"] == parked["approval_url"]
        await approved_result(api, sid, "toolu_t")
        handle = api.rig.client.get_workflow_handle(call_workflow_id(sid, "toolu_t"))
        text = history_plaintext((await handle.fetch_history()).to_json())
        assert "t.txt" in text  # decryption worked: the tool input is there
        assert token not in text and "/approve/" not in text
