"""The whole output of a call, as stored: what the model saw was truncated.

Tools keep their untruncated output in `ToolOutput.metadata` (read_file's
`content`, the shell's `stdout`); the store keeps that dump whole in
`tool_calls.full_output`, outside Temporal. `GET .../tool-calls/{id}/output`
and the audit page's download link serve it as text or JSON.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi import Response

from parkgate.store.results import CallRecord

OutputFormat = Literal["text", "json"]


def full_text(full: dict[str, Any]) -> str:
    """The tool's whole text: metadata `content` / `stdout` when present, else its text blocks."""
    metadata = full.get("metadata") or {}
    for name in ("content", "stdout"):
        value = metadata.get(name)
        if isinstance(value, str):
            return value
    blocks = full.get("content") or []
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def output_response(record: CallRecord, fmt: OutputFormat) -> Response | None:
    """The download response for a call, or None when it stored no output."""
    full = record.full_output
    if full is None:
        return None
    name = f"{record.tool_use_id}-output".replace('"', "")
    if fmt == "json":
        body = json.dumps(full, ensure_ascii=False).encode("utf-8")
        media, ext = "application/json", "json"
    else:
        body = full_text(full).encode("utf-8")
        media, ext = "text/plain; charset=utf-8", "txt"
    return Response(
        body,
        media_type=media,
        headers={"content-disposition": f'attachment; filename="{name}.{ext}"'},
    )
