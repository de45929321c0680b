"""Request-body size limit, enforced before anything parses the body.

A declared Content-Length over the limit is refused without parsing; a
chunked body is buffered up to the limit and refused as soon as it crosses
it. Either way the answer is 413 in the one error shape, never a parse error
or a 500. The rest of a moderately oversized body is read and discarded
first (bounded in size and time) so the client receives the 413 instead of a
connection reset.
"""

from __future__ import annotations

import asyncio
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parkgate.api.shared.errors import error_body


class BodySizeLimitMiddleware:
    """Pure ASGI middleware (no BaseHTTPMiddleware: it must not break streaming)."""

    #: Seconds to spend reading (and discarding) the rest of a refused body,
    #: and the longest pause in it we wait through.
    drain_seconds = 10.0
    idle_seconds = 1.0

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        #: Bodies up to this size are read to the end before the 413 goes out,
        #: so the client gets the answer instead of a connection reset; a
        #: larger declared body is refused at once and the connection closed.
        self.drain_bytes = 4 * max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            if declared <= self.drain_bytes:
                await self._drain(receive)
            await self._reject(send)
            return
        if scope.get("method", "GET") in ("GET", "HEAD", "OPTIONS") and not declared:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                if message.get("more_body", False):
                    await self._drain(receive, self.drain_bytes - total)
                await self._reject(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _drain(self, receive: Receive, budget: int | None = None) -> None:
        """Read and discard up to `budget` bytes; stop on a 1 s lull or after
        `drain_seconds` (a client lying about its length gets its 413 promptly)."""
        left = self.drain_bytes if budget is None else budget
        deadline = asyncio.get_running_loop().time() + self.drain_seconds
        while left > 0:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                message = await asyncio.wait_for(receive(), min(self.idle_seconds, remaining))
            except TimeoutError:
                return
            if message["type"] == "http.disconnect":
                return
            left -= len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _reject(self, send: Send) -> None:
        payload = json.dumps(
            error_body(
                "payload_too_large",
                f"request body exceeds {self.max_bytes} bytes",
                {"max_bytes": self.max_bytes},
            )
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
