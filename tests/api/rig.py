"""The API under test: the real app over a real worker, Temporal dev server and database.

`api_rig(...)` yields an `ApiRig` with an httpx client speaking ASGI to the
app (authenticated with a fresh API key), and `live_server(...)` runs the
same app in uvicorn on a free port for tests that need a real socket
(streaming SSE, access logs, the browser).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
from fastapi import FastAPI
from temporalio.client import Client

from parkgate.api import ApiDeps, create_app
from parkgate.runtime.http_server import ApiServer, api_server, served
from parkgate.runtime.ports import listening_socket
from parkgate.store.repository import Repository
from tests.fixtures.keys import AgentAndHuman
from tests.fixtures.temporal import DurableRig, durable_rig


@dataclass
class ApiRig:
    app: FastAPI
    http: httpx.AsyncClient
    rig: DurableRig
    repo: Repository
    #: The agent's key (roles agent, auditor).
    key: str
    base_url: str
    #: The human's key (roles approver, auditor), same project.
    human_key: str = ""

    @property
    def workspace(self) -> Path:
        return self.rig.workspace

    async def register(self, session_id: str | None = None) -> str:
        sid = session_id or f"s-{uuid.uuid4().hex[:8]}"
        r = await self.http.post(
            "/v1/sessions", json={"session_id": sid, "workspace_path": str(self.workspace)}
        )
        assert r.status_code in (200, 201), r.text
        return sid

    async def submit(
        self, sid: str, name: str, input: dict[str, Any], *, tid: str = "t1",
        call_id: str | None = None, wait: float = 0,
    ) -> httpx.Response:
        cid = call_id or f"toolu_{uuid.uuid4().hex[:10]}"
        return await self.http.post(
            f"/v1/sessions/{sid}/turns/{tid}/tool-calls",
            params={"wait": wait} if wait else None,
            json={"id": cid, "name": name, "input": input},
        )

    async def wait_parked(self, sid: str, call_id: str, timeout: float = 20) -> dict[str, Any]:
        """Poll the resource until it is parked with an approval URL."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            r = await self.http.get(f"/v1/sessions/{sid}/tool-calls/{call_id}")
            body = r.json()
            if body.get("status") == "parked" and body.get("approval_url"):
                return dict(body)
            assert asyncio.get_running_loop().time() < deadline, f"never parked: {body}"
            await asyncio.sleep(0.05)


def free_socket() -> socket.socket:
    return listening_socket()


@asynccontextmanager
async def api_rig(
    client: Client,
    repo: Repository,
    tmp_path: Path,
    *,
    policy: Mapping[str, Any] | None = None,
    base_url: str = "http://testserver",
    **settings: Any,
) -> AsyncIterator[ApiRig]:
    settings.setdefault("public_base_url", base_url)
    async with durable_rig(client, repo, tmp_path, policy=policy, **settings) as rig:
        app = create_app(
            rig.settings,
            ApiDeps(
                repo=repo,
                temporal=client,
                registry=rig.deps.pipeline.registry,
                dispatcher=rig.dispatcher,
                sse_poll_seconds=0.05,
            ),
        )
        tag = uuid.uuid4().hex[:6]
        key, _ = await repo.create_api_key(f"agent-{tag}", roles=["agent", "auditor"])
        human, _ = await repo.create_api_key(f"human-{tag}", roles=["approver", "auditor"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url=base_url,
            auth=AgentAndHuman(key, human),
            timeout=90,
        ) as http:
            yield ApiRig(app, http, rig, repo, key, base_url, human)


@asynccontextmanager
async def live_server(
    app: FastAPI, sock: socket.socket, *, lifespan: Literal["on", "off"] = "off"
) -> AsyncIterator[ApiServer]:
    """Serve `app` on an already-bound socket until the block exits."""
    server = api_server(app, log_level="info", lifespan=lifespan,
                        timeout_graceful_shutdown=2)
    async with served(server, sock, stop_timeout=10):
        yield server


class WebhookSink:
    """A real HTTP receiver for webhook tests; fails the first `fail_first` posts."""

    def __init__(self, fail_first: int = 0) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        self.received: list[dict[str, Any]] = []
        self.attempts = 0
        self.fail_first = fail_first

        async def hook(request: Request) -> JSONResponse:
            self.attempts += 1
            if self.attempts <= self.fail_first:
                return JSONResponse({"ok": False}, status_code=503)
            self.received.append(
                {"body": await request.json(), "headers": dict(request.headers)}
            )
            return JSONResponse({"ok": True})

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
        self.sock = free_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    @asynccontextmanager
    async def running(self) -> AsyncIterator[WebhookSink]:
        async with live_server(self.app, self.sock):  # type: ignore[arg-type]
            yield self


def closed_port_url() -> str:
    """A URL nothing listens on (the socket is bound, never listening)."""
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/hook"


async def cancelled_activities(client: Any, session_id: str, tool_use_id: str) -> set[str]:
    """Names of the activities whose cancellation the call's workflow requested."""
    from temporalio.api.enums.v1 import EventType

    from parkgate.durable.payloads import call_workflow_id

    handle = client.get_workflow_handle(call_workflow_id(session_id, tool_use_id))
    await handle.result()  # the store may say "succeeded" a moment before the workflow ends
    events = list((await handle.fetch_history()).events)
    names = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
             for e in events if e.HasField("activity_task_scheduled_event_attributes")}
    return {names[e.activity_task_cancel_requested_event_attributes.scheduled_event_id]
            for e in events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED}
