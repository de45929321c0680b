"""Audit pages: API-key login, filters, pagination, one call's timeline; or disabled."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match
    return html.unescape(match.group(1))


async def login(api: ApiRig, browser: httpx.AsyncClient, key: str) -> httpx.Response:
    page = await browser.get("/audit/login")
    return await browser.post("/audit/login", data={"csrf": csrf_of(page.text), "api_key": key,
                                                     "next": "/audit"})


async def test_login_list_filter_paginate_and_timeline(api: ApiRig) -> None:
    sid = await api.register()
    (api.workspace / "a.txt").write_text("a")
    for i in range(3):
        assert (await api.submit(sid, "read_file", {"path": "a.txt"}, call_id=f"toolu_{i}",
                                 wait=20)).status_code == 200
    await api.submit(sid, "write_file", {"path": "w.txt", "content": "w"}, call_id="toolu_w")
    await api.wait_parked(sid, "toolu_w")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        r = await browser.get("/audit")
        assert r.status_code == 303 and r.headers["location"].startswith("/audit/login")
        bad = await login(api, browser, "pgk_wrong")
        assert bad.status_code == 401 and "Invalid or revoked" in bad.text
        ok = await login(api, browser, api.key)
        assert ok.status_code == 303 and ok.headers["location"] == "/audit"
        listing = await browser.get("/audit", params={"session_id": sid})
        assert listing.status_code == 200
        assert listing.text.count('href="/audit/calls/') == 4
        parked = await browser.get("/audit", params={"session_id": sid, "status": "parked"})
        assert parked.text.count('href="/audit/calls/') == 1 and "write_file" in parked.text
        page1 = await browser.get("/audit", params={"session_id": sid, "limit": 3})
        assert page1.text.count('href="/audit/calls/') == 3
        nxt = re.search(r'href="([^"]+)" rel="next"', page1.text)
        assert nxt
        page2 = await browser.get(html.unescape(nxt.group(1)))
        assert page2.text.count('href="/audit/calls/') == 1
        link = re.search(r'href="(/audit/calls/\d+)"', page2.text)
        assert link
        detail = await browser.get(link.group(1))
        assert detail.status_code == 200
        assert "tool.called" in detail.text and "tool.completed" in detail.text
        assert "+" in detail.text and " ms" in detail.text  # durations between events
        assert (await browser.get("/audit/calls/999999")).status_code == 404
        assert (await browser.get("/audit/calls/abc")).status_code == 404
        # Revoking the key ends the session.
        keys = await api.repo.list_api_keys(include_revoked=False)
        for key in keys:
            await api.repo.revoke_api_key(key.id)
        assert (await browser.get("/audit")).status_code == 303


async def test_login_needs_csrf(api: ApiRig) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        r = await browser.post("/audit/login", data={"api_key": api.key})
        assert r.status_code == 403 and "pg_audit" not in r.headers.get("set-cookie", "")
        assert "The form expired" in r.text
        wrong = await login(api, browser, "pgk_wrong")
        assert wrong.status_code == 401 and "Invalid or revoked API key." in wrong.text
        assert "pg_audit" not in wrong.headers.get("set-cookie", "")


async def test_audit_pages_can_be_disabled(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, audit_pages_enabled=False) as api:
        for path in ("/audit", "/audit/login", "/audit/calls/1"):
            assert (await api.http.get(path)).status_code == 404
        assert (await api.http.post("/audit/login", data={"api_key": api.key})).status_code == 404
        # The JSON audit API stays available to API keys.
        assert (await api.http.get("/v1/tool-calls")).status_code == 200
