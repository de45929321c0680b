"""Issue 28 (7): `/codec/*` is admin-only; 401 only without a valid key.

Before, any project's auditor decrypted any project's payloads (the payload
keys are the deployment's), and an agent key got 401 as if it were no key.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx

from parkgate.durable.payloads import call_workflow_id
from tests.api.rig import ApiRig
from tests.api.test_audit_pages import login

ROUTES = ("/codec/decode", "/codec/encode")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _started_payloads(api: ApiRig, sid: str, call_id: str) -> list[dict[str, Any]]:
    handle = api.rig.client.get_workflow_handle(call_workflow_id(sid, call_id))
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads
    return [{"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
             "data": base64.b64encode(p.data).decode()} for p in started]


async def test_codec_is_admin_only_and_no_other_project_decrypts(api: ApiRig) -> None:
    sid = await api.register()
    marker = "payments-secret-4411"
    await api.submit(sid, "write_file", {"path": "m.txt", "content": marker}, call_id="toolu_m")
    await api.wait_parked(sid, "toolu_m")
    wire = await _started_payloads(api, sid, "toolu_m")
    body = {"payloads": wire}
    repo = api.repo
    # The repro: another project's auditor (every role but admin) decodes nothing.
    other, _ = await repo.create_api_key("other-auditor", project="payments",
                                         roles=["agent", "approver", "auditor"])
    keys = {"agent": api.key, "approver+auditor": api.human_key, "other project": other}
    for role in ("agent", "approver", "auditor"):
        keys[role], _ = await repo.create_api_key(f"codec-{role}", roles=[role])
    for who, key in keys.items():
        for route in ROUTES:
            r = await api.http.post(route, json=body, headers=bearer(key))
            assert r.status_code == 403, (who, route, r.text)
            error = r.json()["error"]
            assert error["code"] == "forbidden" and "admin role" in error["message"]
            assert error["details"]["required_roles"] == ["admin"]
            assert marker not in r.text
    # No key, a made-up key, a revoked key: 401.
    revoked, _ = await repo.create_api_key("codec-revoked", roles=["admin"])
    await repo.revoke_api_key("codec-revoked")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as anon:
        for headers in ({}, bearer("pgk_made_up"), bearer(revoked)):
            for route in ROUTES:
                r = await anon.post(route, json=body, headers=headers)
                assert r.status_code == 401, (headers, route, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
                assert marker not in r.text
        # An auditor's audit session is no admin either.
        assert (await login(api, anon, api.human_key)).status_code == 303
        r = await anon.post("/codec/decode", json=body)
        assert r.status_code == 403 and marker not in r.text
    # An admin (of any project: the codec is deployment-wide) decodes.
    admin, _ = await repo.create_api_key("codec-admin", project="ops", roles=["admin"])
    r = await api.http.post("/codec/decode", json=body, headers=bearer(admin))
    assert r.status_code == 200, r.text
    decoded = b"".join(base64.b64decode(p["data"]) for p in r.json()["payloads"])
    assert marker.encode() in decoded
    # Nothing was decided meanwhile.
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_m")
    assert still.json()["status"] == "parked" and still.json()["decided_by"] is None


def test_openapi_declares_403_for_the_codec(api: ApiRig) -> None:
    spec = api.app.openapi()
    for route in ROUTES:
        assert {"401", "403"} <= set(spec["paths"][route]["post"]["responses"])
