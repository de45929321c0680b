"""A local stand-in for Slack's Web API (Slack cannot be reached from the test machine).

A real HTTP server (Starlette in uvicorn on a free port) answering the JSON
shapes Slack documents for chat.postMessage and chat.update, checking the bot
token, plus a response_url receiver for ephemeral replies. The code under test
talks to it through the real slack-sdk AsyncWebClient (`slack_api_url`).
Interactivity requests are signed exactly as Slack signs them (`signed`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from tests.api.rig import free_socket, live_server

BOT_TOKEN = "xoxb-test-bot-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CHANNEL = "C0PARKGATE"


class FakeSlack:
    """Messages by (channel, ts), every Web API call, and ephemeral replies."""

    def __init__(self) -> None:
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: Every request per method, refused ones included.
        self.attempts: dict[str, int] = {}
        #: When set, chat.postMessage answers only once this event is set (a slow Slack).
        self.hold_posts: asyncio.Event | None = None
        self.ephemeral: list[dict[str, Any]] = []
        #: The blocks as first posted (a stale client still shows these buttons).
        self.first_blocks: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._ts = itertools.count(1)
        self.sock = free_socket()
        port = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.api_url = f"{self.base}/api/"
        self.app = Starlette(routes=[
            Route("/api/{method}", self._api, methods=["POST"]),
            Route("/actions/{n}", self._response_url, methods=["POST"]),
        ])

    async def _args(self, request: Request) -> dict[str, Any]:
        if request.headers.get("content-type", "").startswith("application/json"):
            data = await request.json()
            return dict(data)
        return dict(parse_qsl((await request.body()).decode()))

    async def _api(self, request: Request) -> JSONResponse:
        method = request.path_params["method"]
        self.attempts[method] = self.attempts.get(method, 0) + 1
        if request.headers.get("authorization") != f"Bearer {BOT_TOKEN}":
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        args = await self._args(request)
        self.calls.append((method, args))
        if method == "chat.postMessage":
            if self.hold_posts is not None:
                await self.hold_posts.wait()
            if args.get("channel") != CHANNEL:
                return JSONResponse({"ok": False, "error": "channel_not_found"})
            ts = f"{int(time.time())}.{next(self._ts):06d}"
            message = {"type": "message", "ts": ts, "text": args.get("text"),
                       "blocks": args.get("blocks"), "bot_id": "B0PARKGATE"}
            self.messages[(CHANNEL, ts)] = message
            self.first_blocks[(CHANNEL, ts)] = list(args.get("blocks") or [])
            return JSONResponse({"ok": True, "channel": CHANNEL, "ts": ts, "message": message})
        if method == "chat.update":
            key = (str(args.get("channel")), str(args.get("ts")))
            if key not in self.messages:
                return JSONResponse({"ok": False, "error": "message_not_found"})
            self.messages[key].update(text=args.get("text"), blocks=args.get("blocks"))
            return JSONResponse({"ok": True, "channel": key[0], "ts": key[1],
                                 "text": args.get("text")})
        return JSONResponse({"ok": False, "error": "unknown_method"})

    async def _response_url(self, request: Request) -> PlainTextResponse:
        self.ephemeral.append(await request.json())
        return PlainTextResponse("ok")

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeSlack]:
        async with live_server(self.app, self.sock):  # type: ignore[arg-type]
            yield self

    # ---------------------------------------------------------------- helpers
    def posted(self) -> list[dict[str, Any]]:
        return [m for (_, _), m in self.messages.items()]

    def click(self, message_ts: str, user_id: str, action_id: str) -> dict[str, Any]:
        """A block_actions payload as Slack sends it for a click on `message_ts`."""
        message = self.messages[(CHANNEL, message_ts)]
        actions = next(b for b in self.first_blocks[(CHANNEL, message_ts)]
                       if b["type"] == "actions")
        button = next(e for e in actions["elements"] if e["action_id"] == action_id)
        n = len(self.ephemeral) + len(self.calls)
        return {
            "type": "block_actions",
            "user": {"id": user_id, "username": user_id.lower(), "team_id": "T0TEAM"},
            "api_app_id": "A0PARKGATE",
            "token": "legacy-verification-token",
            "container": {"type": "message", "message_ts": message_ts,
                          "channel_id": CHANNEL, "is_ephemeral": False},
            "trigger_id": "123.456.abc",
            "team": {"id": "T0TEAM", "domain": "example"},
            "channel": {"id": CHANNEL, "name": "approvals"},
            "message": message,
            "response_url": f"{self.base}/actions/{n}",
            "actions": [{**button, "block_id": actions["block_id"],
                         "action_ts": f"{time.time():.6f}"}],
        }


def signed(payload: dict[str, Any], *, secret: str = SIGNING_SECRET,
           timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an interactivity request, signed as Slack signs it:
    v0=HMAC-SHA256(secret, "v0:<timestamp>:<raw body>")."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return signed_raw(body, secret=secret, timestamp=timestamp)


def signed_raw(body: bytes, *, secret: str = SIGNING_SECRET,
               timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    """Sign any raw body the way Slack does."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body,
                      hashlib.sha256).hexdigest()
    return body, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
                  "Content-Type": "application/x-www-form-urlencoded"}

