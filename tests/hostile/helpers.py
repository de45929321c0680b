"""Shared bits of the hostile-input tests: an authenticated client that tallies
every bad input tried and every 5xx seen, and small HTML helpers."""

from __future__ import annotations

import asyncio
import html
import re
import time
from typing import Any

import httpx

from tests.faults.harness import summary
from tests.faults.harness.apiclient import TERMINAL
from tests.faults.harness.stack import Stack
from tests.fixtures.keys import AgentAndHuman


class Hostile:
    """httpx against the stack; `bad(...)` sends a hostile request and tallies it."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.server_errors: list[str] = []
        self.http = httpx.AsyncClient(
            base_url=stack.base_url,
            auth=AgentAndHuman(stack.api_key or "", stack.human_key),
            timeout=httpx.Timeout(60.0, connect=5.0),
        )
        #: No credentials at all (for 401 tests and the approval pages).
        self.anon = httpx.AsyncClient(base_url=stack.base_url,
                                      timeout=httpx.Timeout(60.0, connect=5.0))

    async def __aenter__(self) -> Hostile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()
        await self.anon.aclose()

    def note(self, r: httpx.Response, *, bad: bool) -> httpx.Response:
        if r.status_code >= 500:
            self.server_errors.append(
                f"{r.request.method} {r.request.url.path[:120]} -> {r.status_code}: {r.text[:200]}"
            )
        summary.add(bad_inputs_tried=1 if bad else 0,
                    server_errors=1 if r.status_code >= 500 else 0)
        return r

    async def bad(self, method: str, url: str, *, anon: bool = False, **kw: Any) -> httpx.Response:
        """One hostile request (counted as a bad input tried)."""
        client = self.anon if anon else self.http
        return self.note(await client.request(method, url, **kw), bad=True)

    async def ok(self, method: str, url: str, **kw: Any) -> httpx.Response:
        """A well-formed request (5xx still counted)."""
        return self.note(await self.http.request(method, url, **kw), bad=False)

    # ------------------------------------------------------------------
    async def register(self, sid: str, workspace: str) -> None:
        r = await self.ok("POST", "/v1/sessions",
                          json={"session_id": sid, "workspace_path": workspace, "kind": "main"})
        assert r.status_code in (200, 201), r.text

    async def submit(self, sid: str, block: dict[str, Any], tid: str = "t1",
                     wait: float | None = None) -> dict[str, Any]:
        params = {"wait": str(wait)} if wait is not None else None
        r = await self.ok("POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls", json=block,
                          params=params)
        assert r.status_code in (200, 201, 202), r.text
        return dict(r.json())

    async def call(self, sid: str, tuid: str, wait: float | None = None) -> dict[str, Any]:
        params = {"wait": str(wait)} if wait is not None else None
        r = await self.ok("GET", f"/v1/sessions/{sid}/tool-calls/{tuid}", params=params)
        assert r.status_code in (200, 202), r.text
        return dict(r.json())

    async def until(self, sid: str, tuid: str, statuses: set[str],
                    timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            call = await self.call(sid, tuid)
            if call.get("status") in statuses or call.get("status") in TERMINAL:
                return call
            if time.monotonic() > deadline:
                raise TimeoutError(f"{tuid} stuck in {call.get('status')}")
            await asyncio.sleep(0.2)


def path_of(url: str) -> str:
    """The path (and query) of an absolute URL, to request it through our client."""
    parsed = httpx.URL(url)
    return parsed.raw_path.decode("ascii")


def assert_error_shape(r: httpx.Response, *statuses: int) -> None:
    """A 4xx in the one error shape: {"error": {"code", "message", ...}}."""
    assert r.status_code in statuses, f"{r.status_code} (wanted {statuses}): {r.text[:300]}"
    body = r.json()
    assert isinstance(body, dict) and "error" in body, body
    assert body["error"].get("code") and body["error"].get("message"), body


_CSRF = re.compile(r'name="csrf"\s+value="([^"]+)"')


def csrf_of(page: str) -> str | None:
    m = _CSRF.search(page)
    return html.unescape(m.group(1)) if m else None


def assert_inert(page: str, *payloads: str) -> None:
    """No payload carrying markup appears raw in the page (escaped is fine), and
    no attribute starts a javascript: URL."""
    for payload in payloads:
        if any(ch in payload for ch in "<>\""):
            assert payload not in page, f"raw payload reflected: {payload!r}"
    lowered = page.lower()
    for needle in ("<script>alert", "<img src=x", 'href="javascript:', "src=\"javascript:"):
        assert needle not in lowered, f"live markup in page: {needle!r}"
