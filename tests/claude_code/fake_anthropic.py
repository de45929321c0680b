"""A scripted Anthropic Messages API for running the real Claude Code CLI offline.

The CLI is pointed at it with `ANTHROPIC_BASE_URL`. Requests that carry tools
are the agent loop: the n-th one (n = assistant turns already in the
conversation) answers with the n-th scripted step, a `tool_use` block or the
final text. Requests without tools (titles, summaries, command checks) get a
short text. Every tool_result the CLI sends back is recorded for assertions.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.api.rig import free_socket, live_server

MODEL = "claude-sonnet-4-5"


@dataclass
class ToolStep:
    """The model asks for one tool call."""

    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: f"toolu_{uuid.uuid4().hex[:16]}")
    #: The API holds this step's answer until the event is set (the test acts first).
    hold: asyncio.Event | None = None


@dataclass
class TextStep:
    """The model's final answer."""

    text: str


Step = ToolStep | TextStep


@dataclass
class FakeAnthropic:
    """The scripted API; `tool_results` holds every tool_result block it received."""

    script: list[Step]
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def _step(self, body: dict[str, Any]) -> Step:
        messages = body.get("messages") or []
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        last = messages[-1] if messages else {}
        content = last.get("content") if isinstance(last, dict) else None
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    if block not in self.tool_results:
                        self.tool_results.append(block)
        if turns < len(self.script):
            return self.script[turns]
        return self.script[-1] if isinstance(self.script[-1], TextStep) else TextStep("done")

    def result_for(self, tool_use_id: str) -> dict[str, Any] | None:
        return next((r for r in self.tool_results if r.get("tool_use_id") == tool_use_id), None)

    def result_text(self, tool_use_id: str) -> str:
        block = self.result_for(tool_use_id)
        assert block is not None, f"no tool_result for {tool_use_id}: {self.tool_results}"
        content = block.get("content")
        if isinstance(content, list):
            return "".join(c.get("text", "") for c in content if isinstance(c, dict))
        return str(content)

    async def messages(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        step = self._step(body) if body.get("tools") else TextStep("ok")
        if isinstance(step, ToolStep) and step.hold is not None:
            await step.hold.wait()
        message = _message(step, body.get("model") or MODEL)
        if body.get("stream"):
            return StreamingResponse(_sse(message), media_type="text/event-stream")
        return JSONResponse(message)

    async def count_tokens(self, request: Request) -> Response:
        return JSONResponse({"input_tokens": 10})

    async def other(self, request: Request) -> Response:
        return JSONResponse({})

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/{path:path}", self.other, methods=["GET", "POST", "HEAD"]),
        ])

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeAnthropic]:
        sock = free_socket()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with live_server(self.app(), sock):  # type: ignore[arg-type]
            yield self


def _message(step: Step, model: str) -> dict[str, Any]:
    if isinstance(step, ToolStep):
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": step.id, "name": step.name, "input": step.input}
        ]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": step.text}]
        stop = "end_turn"
    return {
        "id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "role": "assistant",
        "model": model, "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


def _sse(message: dict[str, Any]) -> Iterator[str]:
    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    start = {**message, "content": [], "stop_reason": None}
    yield event("message_start", {"type": "message_start", "message": start})
    for i, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                        "content_block": {**block, "input": {}}})
            yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta",
                                  "partial_json": json.dumps(block["input"])}})
        else:
            yield event("content_block_start", {"type": "content_block_start", "index": i,
                        "content_block": {"type": "text", "text": ""}})
            yield event("content_block_delta", {"type": "content_block_delta", "index": i,
                        "delta": {"type": "text_delta", "text": block["text"]}})
        yield event("content_block_stop", {"type": "content_block_stop", "index": i})
    yield event("message_delta", {"type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 5}})
    yield event("message_stop", {"type": "message_stop"})
