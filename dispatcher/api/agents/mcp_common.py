"""What the MCP endpoint's tools/call and its tasks share: who calls, and a call's
record as an MCP `CallToolResult` (the held request and `tasks/get` answer alike)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from starlette.requests import Request

from parkgate.api.shared.schemas import CallResource
from parkgate.approvals.access import Principal
from parkgate.calls.records import CallStatus
from parkgate.models import ImageBlock, ToolUseBlock
from parkgate.store.results import SessionRecord

#: `_meta` keys a tools/call may carry (and every result carries back).
META_TOOL_USE_ID = "tool_use_id"
META_TURN_ID = "turn_id"
STATE_KEY = "parkgate_mcp_caller"


@dataclass(frozen=True)
class Caller:
    """Who is calling (from the API key) and in which session (from the path)."""

    principal: Principal
    session: SessionRecord


def caller_of(ctx: ServerRequestContext[Any]) -> Caller:
    """The caller the gateway authenticated before handing the request to the SDK."""
    request = ctx.request
    if not isinstance(request, Request):
        raise RuntimeError("the MCP endpoint is served over HTTP only")
    caller: Caller = request.scope["state"][STATE_KEY]
    return caller


def content_of(resource: CallResource) -> list[types.ContentBlock]:
    out: list[types.ContentBlock] = []
    for block in resource.result.content if resource.result else []:
        if isinstance(block, ImageBlock):
            out.append(types.ImageContent(data=block.source.data,
                                          mime_type=block.source.media_type))
        else:
            out.append(types.TextContent(text=block.text))
    return out


def result_meta(tool_use_id: str, status: CallStatus, **extra: Any) -> dict[str, Any]:
    return {META_TOOL_USE_ID: tool_use_id, "parkgate/status": status.value,
            **{f"parkgate/{k}": v for k, v in extra.items() if v is not None}}


def finished_result(resource: CallResource) -> types.CallToolResult:
    result = resource.result
    return types.CallToolResult(
        content=content_of(resource),
        is_error=bool(result and result.is_error),
        meta=result_meta(resource.tool_use_id, resource.status,
                         error_class=result.error_class.value if result and result.error_class
                         else None),
    )


def released_result(block: ToolUseBlock, resource: CallResource) -> types.CallToolResult:
    """A client tool's call, approved: the client runs it (parkgate does not).

    For an MCP client that runs its own tools and uses parkgate as the gate:
    claim, start, run exactly the released input, report (docs/CLIENT_TOOLS.md)."""
    base = f"/v1/sessions/{resource.session_id}/tool-calls/{block.id}"
    text = (f"{block.name} ({block.id}) is approved and released to its client, which runs "
            f"it itself: claim it (POST {base}/claim), start the claim just before "
            f"running (POST {base}/start with its claim_id), run exactly input "
            f"{json.dumps(resource.input, sort_keys=True)} (input_sha256 "
            f"{resource.input_sha256}), then report the outcome (POST {base}/outcome). "
            "parkgate has not run it.")
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=False,
        meta=result_meta(block.id, CallStatus.RELEASED, input_sha256=resource.input_sha256,
                         claim=f"{base}/claim", start=f"{base}/start",
                         outcome=f"{base}/outcome"),
    )


def error_result(text: str, tool_use_id: str | None = None) -> types.CallToolResult:
    meta = {META_TOOL_USE_ID: tool_use_id} if tool_use_id else None
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True, meta=meta)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
