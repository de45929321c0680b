"""Real faults in front of the real app: 503 + Retry-After, and SSE streams cut short."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Flaky:
    """Answers the first `unavailable` requests with 503 + Retry-After, and ends
    the first `cut_streams` event streams right after their first event."""

    def __init__(self, app: ASGIApp, *, unavailable: int = 0, cut_streams: int = 0) -> None:
        self.app = app
        self.unavailable = unavailable
        self.cut_streams = cut_streams
        self.answered_503 = 0
        self.cut = 0
        self.last_event_ids: list[str | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)  # state etc. of the wrapped FastAPI app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.answered_503 < self.unavailable:
            self.answered_503 += 1
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"retry-after", b"0.2"),
                                    (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body":
                        b'{"error":{"code":"unavailable","message":"try later"}}'})
            return
        if scope["path"].endswith("/events") and scope["path"].startswith("/v1/sessions"):
            headers = dict(scope["headers"])
            last = headers.get(b"last-event-id")
            self.last_event_ids.append(last.decode() if last else None)
            if self.cut < self.cut_streams:
                self.cut += 1
                await self._cut_after_first_event(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _cut_after_first_event(self, scope: Scope, receive: Receive, send: Send) -> None:
        done = False

        async def cutting_send(message: Message) -> None:
            nonlocal done
            if done:
                return  # the response already ended: the rest goes nowhere
            if message["type"] == "http.response.body" and b"data:" in message.get("body", b""):
                done = True
                message = {**message, "more_body": False}
            await send(message)

        await self.app(scope, receive, cutting_send)
