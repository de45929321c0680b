"""An agent-side client for the fault scenarios: the agent API over HTTP, with
the retry behaviour a well-behaved agent has (reconnect, re-attach by
tool_use_id) and an honest count of every 5xx the server gave."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fixtures.keys import AgentAndHuman

TERMINAL = {"succeeded", "failed", "denied", "expired", "cancelled"}

#: A 503 is the honest answer while a dependency is down on purpose; any other
#: 5xx, or a 503 outside an injected fault, counts against the suite.
RETRYABLE_STATUS = {502, 503, 504}


@dataclass
class ServerErrorLog:
    """Every 5xx response seen, split into tolerated (a 503 during a fault) and not.

    While `fault_active` the agent retries every 5xx (so the scenario can still
    prove nothing was lost), but only a 503 is tolerated; anything else lands
    in `unexpected` and fails the scenario's 5xx check.
    """

    unexpected: list[str] = field(default_factory=list)
    tolerated: int = 0
    #: The paths of tolerated 503s that advised when to retry (Retry-After).
    advised: set[str] = field(default_factory=set)
    fault_active: bool = False

    def note(self, response: httpx.Response) -> None:
        if response.status_code < 500:
            return
        if response.status_code == 503 and self.fault_active:
            self.tolerated += 1
            if response.headers.get("retry-after"):
                self.advised.add(response.request.url.path)
            return
        try:
            body = response.text[:300]
        except Exception:  # streaming/undecodable bodies
            body = "<unreadable>"
        self.unexpected.append(
            f"{response.request.method} {response.request.url.path} -> "
            f"{response.status_code}: {body}"
        )


class AgentClient:
    """The agent API with reconnect-and-retry semantics."""

    def __init__(
        self, base_url: str, api_key: str, errors: ServerErrorLog | None = None,
        *, human_key: str | None = None,
    ) -> None:
        self.errors = errors or ServerErrorLog()
        self.retries = 0
        #: 404s from deciding a request id a "parked" call resource had just shown.
        self.decide_not_found = 0
        self.http = httpx.AsyncClient(
            base_url=base_url,
            auth=AgentAndHuman(api_key, human_key),
            timeout=httpx.Timeout(90.0, connect=5.0),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            event_hooks={"response": [self._hook]},
        )

    async def _hook(self, response: httpx.Response) -> None:
        if response.status_code >= 500:
            await response.aread()
        self.errors.note(response)

    async def aclose(self) -> None:
        await self.http.aclose()

    # ------------------------------------------------------------------
    async def request(
        self, method: str, url: str, *, deadline: float, **kw: Any
    ) -> httpx.Response:
        """One logical request, retried on connection loss and 502/503/504 until `deadline`."""
        delay = 0.1
        while True:
            try:
                response = await self.http.request(method, url, **kw)
                retry = response.status_code in RETRYABLE_STATUS or (
                    # While a fault is injected a well-behaved agent retries any
                    # 5xx; the hook has already recorded it against the server.
                    response.status_code >= 500 and self.errors.fault_active
                )
                if not retry:
                    return response
                # The body says which 503 it was (no worker, unproven, ...).
                last: str = f"HTTP {response.status_code} {response.text[:300]}"
            except (httpx.TransportError, httpx.RemoteProtocolError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            self.retries += 1
            if time.monotonic() + delay > deadline:
                raise TimeoutError(f"{method} {url}: gave up retrying ({last})")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # ------------------------------------------------------------------
    async def register_session(self, session_id: str, workspace: str, timeout: float = 30) -> None:
        r = await self.request(
            "POST", "/v1/sessions",
            json={"session_id": session_id, "workspace_path": workspace, "kind": "main"},
            deadline=time.monotonic() + timeout,
        )
        assert r.status_code in (200, 201), f"register session: {r.status_code} {r.text}"

    async def submit(
        self, sid: str, tid: str, block: dict[str, Any], *, wait: float | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Start (or re-attach to) a call; returns the call resource."""
        params = {"wait": str(wait)} if wait is not None else None
        r = await self.request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls", json=block, params=params,
            deadline=time.monotonic() + timeout + (wait or 0),
        )
        assert r.status_code in (200, 201, 202), f"submit {block['id']}: {r.status_code} {r.text}"
        return dict(r.json())

    async def get(
        self, sid: str, tuid: str, *, wait: float | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        params = {"wait": str(wait)} if wait is not None else None
        r = await self.request(
            "GET", f"/v1/sessions/{sid}/tool-calls/{tuid}", params=params,
            deadline=time.monotonic() + timeout + (wait or 0),
        )
        assert r.status_code in (200, 202), f"get {tuid}: {r.status_code} {r.text}"
        return dict(r.json())

    async def wait_status(
        self, sid: str, tuid: str, statuses: set[str], *, timeout: float, poll_wait: float = 10
    ) -> dict[str, Any]:
        """Long-poll (re-polling after drops) until the call's status is in `statuses`."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{sid}/{tuid} never reached {sorted(statuses)}")
            wait = None if statuses - TERMINAL else min(poll_wait, max(1, int(remaining)))
            call = await self.get(sid, tuid, wait=wait, timeout=remaining)
            if call.get("status") in statuses:
                return call
            if call.get("status") in TERMINAL:
                return call  # terminal but not the one hoped for: let the caller judge
            if wait is None:
                await asyncio.sleep(0.2)

    async def events(self, sid: str, tuid: str, timeout: float = 30) -> list[dict[str, Any]]:
        r = await self.request(
            "GET", f"/v1/sessions/{sid}/tool-calls/{tuid}/events",
            deadline=time.monotonic() + timeout,
        )
        assert r.status_code == 200, f"events {tuid}: {r.status_code} {r.text}"
        body: Any = r.json()
        if isinstance(body, dict):
            body = body.get("events", body.get("items", []))
        return [e for e in body if isinstance(e, dict)]

    async def request_id(self, sid: str, call: dict[str, Any]) -> str:
        """The approval request id of a parked call (resource first, then its events)."""
        for key in ("request_id", "approval_request_id"):
            if call.get(key):
                return str(call[key])
        approval = call.get("approval")
        if isinstance(approval, dict) and approval.get("request_id"):
            return str(approval["request_id"])
        for event in await self.events(sid, call["tool_use_id"]):
            if event.get("type") == "tool.confirmation_requested" and event.get("request_id"):
                return str(event["request_id"])
        raise AssertionError(f"no request id for parked call {call}")

    async def decide(
        self, sid: str, tid: str, request_id: str, decision: str, reason: str = "",
        timeout: float = 60, not_found_grace: float = 0.0,
    ) -> httpx.Response:
        """The spec's confirmation endpoint; 200 when it won, 409 when decided before.

        `not_found_grace`: keep retrying a 404 this long (the request id came from a
        call resource that said "parked"); each such 404 is counted in
        `decide_not_found` so a scenario can still report the inconsistency.
        """
        give_up_404 = time.monotonic() + not_found_grace
        while True:
            r = await self.request(
                "POST", f"/v1/sessions/{sid}/turns/{tid}/confirmations/{request_id}",
                json={"decision": decision, "reason": reason},
                deadline=time.monotonic() + timeout,
            )
            if r.status_code == 404 and time.monotonic() < give_up_404:
                self.decide_not_found += 1
                await asyncio.sleep(0.2)
                continue
            break
        assert r.status_code in (200, 409), f"decide {request_id}: {r.status_code} {r.text}"
        return r

    async def cancel(self, sid: str, tuid: str, timeout: float = 60) -> httpx.Response:
        r = await self.request(
            "POST", f"/v1/sessions/{sid}/tool-calls/{tuid}/cancel",
            deadline=time.monotonic() + timeout,
        )
        assert r.status_code in (200, 202, 409), f"cancel {tuid}: {r.status_code} {r.text}"
        return r
