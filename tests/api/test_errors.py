"""Every bad request is a 4xx in the one error shape; never a 500."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


def _is_error_shape(
    r: httpx.Response, status: int, code: str | None = None
) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    if code is not None:
        assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return dict(body["error"])


async def test_missing_invalid_and_revoked_keys_are_401(api: ApiRig) -> None:
    url = "/v1/tool-calls"
    _is_error_shape(await api.http.get(url, headers={"Authorization": ""}), 401, "unauthorized")
    _is_error_shape(await api.http.get(url, headers={"Authorization": "Bearer nope"}), 401)
    _is_error_shape(await api.http.get(url, headers={"Authorization": "Basic abc"}), 401)
    key, rec = await api.repo.create_api_key("short-lived", roles=["auditor"])
    ok = await api.http.get(url, headers={"Authorization": f"Bearer {key}"})
    assert ok.status_code == 200
    await api.repo.revoke_api_key(rec.name)
    r = await api.http.get(url, headers={"Authorization": f"Bearer {key}"})
    _is_error_shape(r, 401, "unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"


async def test_validation_errors_are_422_with_details(api: ApiRig) -> None:
    sid = await api.register()
    url = f"/v1/sessions/{sid}/turns/t1/tool-calls"
    err = _is_error_shape(await api.http.post(url, json={"name": "read_file"}), 422,
                          "invalid_request")
    assert any(d["loc"][-1] == "id" for d in err["details"])
    _is_error_shape(await api.http.post(url, content=b"{not json",
                                        headers={"content-type": "application/json"}), 422)
    _is_error_shape(await api.http.post(url, json=[1, 2]), 422)
    _is_error_shape(await api.http.post(url, json={"id": "a/b", "name": "x"}), 422)
    _is_error_shape(await api.http.post(url, json={"id": "x", "name": "x", "input": "str"}), 422)


@pytest.mark.parametrize("wait", ["61", "-1", "abc", "nan", "1e9"])
async def test_bad_wait_is_422(api: ApiRig, wait: str) -> None:
    sid = await api.register()
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls?wait={wait}",
                            json={"id": "toolu_1", "name": "read_file", "input": {}})
    _is_error_shape(r, 422, "invalid_request")
    g = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_1?wait={wait}")
    _is_error_shape(g, 422)


async def test_oversize_body_is_413(api: ApiRig) -> None:
    sid = await api.register()
    limit = api.rig.settings.max_request_bytes
    big = b'{"id": "x", "name": "read_file", "input": {"p": "' + b"a" * limit + b'"}}'
    url = f"/v1/sessions/{sid}/turns/t1/tool-calls"
    _is_error_shape(await api.http.post(url, content=big,
                                        headers={"content-type": "application/json"}),
                    413, "payload_too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536

    _is_error_shape(await api.http.post(url, content=chunks(),
                                        headers={"content-type": "application/json"}), 413)
    # Just under the limit is parsed normally (here: a 422 for the wrong shape).
    small = b'{"x": "' + b"a" * 1000 + b'"}'
    _is_error_shape(await api.http.post(url, content=small,
                                        headers={"content-type": "application/json"}), 422)


async def test_unknown_things_are_404(api: ApiRig) -> None:
    _is_error_shape(await api.http.post("/v1/sessions/nope/turns/t/tool-calls",
                                        json={"id": "a", "name": "read_file"}), 404, "not_found")
    _is_error_shape(await api.http.get("/v1/sessions/nope/tool-calls/a"), 404)
    _is_error_shape(await api.http.get("/v1/sessions/nope/events"), 404)
    _is_error_shape(await api.http.get("/v1/sessions/nope/tools"), 404)
    sid = await api.register()
    _is_error_shape(await api.http.get(f"/v1/sessions/{sid}/tool-calls/missing"), 404)
    _is_error_shape(await api.http.get(f"/v1/sessions/{sid}/tool-calls/missing/events"), 404)
    _is_error_shape(await api.http.get("/v1/no-such-route"), 404, "not_found")
    _is_error_shape(await api.http.delete("/v1/tool-calls"), 405, "method_not_allowed")


async def test_sessions_register_conflict_and_roots(api: ApiRig, tmp_path: Path) -> None:
    ws = str(api.workspace)
    r = await api.http.post("/v1/sessions", json={"session_id": "sx", "workspace_path": ws})
    assert r.status_code == 201 and r.json()["workspace_path"] == str(api.workspace.resolve())
    again = await api.http.post("/v1/sessions", json={"session_id": "sx", "workspace_path": ws})
    assert again.status_code == 200
    sub = api.workspace / "sub"
    sub.mkdir()
    conflict = await api.http.post("/v1/sessions",
                                   json={"session_id": "sx", "workspace_path": str(sub)})
    err = _is_error_shape(conflict, 409, "session_conflict")
    assert err["details"]["workspace_path"] == str(api.workspace.resolve())
    outside = tmp_path / "outside"
    outside.mkdir()
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "sy", "workspace_path": str(outside)}), 422, "workspace_not_allowed")
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "sy", "workspace_path": str(api.workspace / ".." / "outside")}),
        422, "workspace_not_allowed")
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "sy", "workspace_path": "relative/path"}), 422, "invalid_workspace")
    for home_relative in ("~", "~/x", "~nosuchuser·é/x"):  # the server's home is not the agent's
        _is_error_shape(await api.http.post("/v1/sessions", json={
            "session_id": "sy", "workspace_path": home_relative}), 422, "invalid_workspace")
    lone = b'{"session_id": "sy", "workspace_path": "/srv\\ud800"}'
    _is_error_shape(await api.http.post("/v1/sessions", content=lone,
                                        headers={"content-type": "application/json"}),
                    422)  # pydantic: string_unicode
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "sy", "workspace_path": str(api.workspace / "missing")}),
        422, "invalid_workspace")
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "s/y", "workspace_path": ws}), 422)
    _is_error_shape(await api.http.post("/v1/sessions", json={
        "session_id": "sz", "workspace_path": ws, "kind": "boss"}), 422)
    got = await api.http.get("/v1/sessions/sx")
    assert got.status_code == 200 and got.json()["kind"] == "main"


async def test_oversize_body_over_a_real_socket(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Through uvicorn the client reads the 413 (no connection reset), and a body
    that only claims to be huge is refused without waiting for it."""
    sock = free_socket()
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        sid = await api.register()
        limit = api.rig.settings.max_request_bytes
        async with httpx.AsyncClient(base_url=base, timeout=30,
                                     headers={"Authorization": f"Bearer {api.key}"}) as c:
            r = await c.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                             json={"id": "big", "name": "write_file",
                                   "input": {"path": "b", "content": "a" * (limit + 1)}})
            _is_error_shape(r, 413, "payload_too_large")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(limit * 100).encode() + b"\r\n\r\n{}")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        assert status_line.split()[1] == b"413", status_line


async def test_lone_surrogates_in_tool_input_are_422(api: ApiRig) -> None:
    sid = await api.register()
    raw = b'{"id": "toolu_s", "name": "shell", "input": {"command": "echo \\ud800"}}'
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", content=raw,
                            headers={"content-type": "application/json"})
    err = _is_error_shape(r, 422, "invalid_text")
    assert err["details"][0]["loc"] == ["body", "input", "command"]
    assert (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_s")).status_code == 404


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_non_finite_numbers_in_tool_input_are_422(api: ApiRig, literal: str) -> None:
    """JSON has no NaN (Python's parser takes it): refused naming the place,
    never hashed in Python's spelling nor turned into null for the workflow."""
    sid = await api.register()
    url = f"/v1/sessions/{sid}/turns/t1/tool-calls"
    raw = f'{{"id": "toolu_n", "name": "read_file", "input": {{"path": "a", "w": [1, {literal}]}}}}'
    r = await api.http.post(url, content=raw.encode(),
                            headers={"content-type": "application/json"})
    err = _is_error_shape(r, 422, "invalid_request")
    assert f"input.w[1]: {literal} is not a JSON number" in err["message"]
    assert err["details"][0]["loc"] == ["body", "input"]
    assert (await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_n")).status_code == 404
    batch = f'{{"calls": [{{"id": "toolu_b", "name": "read_file", "input": {{"x": {literal}}}}}]}}'
    r = await api.http.post(f"{url}:batch", content=batch.encode(),
                            headers={"content-type": "application/json"})
    assert f"input.x: {literal} is not a JSON number" in _is_error_shape(r, 422)["message"]
    edits = f'{{"decision": "allow_with_edits", "edited_input": {{"x": {literal}}}}}'
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/any",
                            content=edits.encode(), headers={"content-type": "application/json"})
    err = _is_error_shape(r, 422, "invalid_request")
    assert f"{literal} is not a JSON number" in err["message"]
    assert err["details"][0]["loc"] == ["body", "edited_input"]
