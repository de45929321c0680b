"""What the sync and async clients share: paths, retry timing, SSE parsing."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from parkgate.api.schemas import EventOut
from parkgate.models import Session, ToolUseBlock

#: Statuses retried after Retry-After (the server is up but cannot answer now).
RETRY_STATUSES = frozenset({429, 503})
#: The longest long-poll the server accepts per request.
MAX_POLL_SECONDS = 60.0
#: Cap on one Retry-After sleep, so a bad header cannot stall an agent.
MAX_RETRY_SLEEP = 30.0
#: Transport failures worth retrying: every request the client makes is
#: idempotent (submits attach by tool_use_id), so resending is safe.
RETRY_EXCEPTIONS = (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError, httpx.PoolTimeout, httpx.ConnectTimeout)


def retry_delay(response: httpx.Response | None, attempt: int) -> float:
    """Seconds to wait before attempt `attempt + 1`: Retry-After if given, else backoff."""
    if response is not None:
        header = response.headers.get("Retry-After")
        if header is not None:
            try:
                return min(max(float(header), 0.0), MAX_RETRY_SLEEP)
            except ValueError:
                pass
    return min(0.25 * 2**attempt, 5.0) * (0.5 + random.random() / 2)


def as_block(tool_use: ToolUseBlock | dict[str, Any]) -> ToolUseBlock:
    """Accept the model's block as parsed JSON or as the model class."""
    return tool_use if isinstance(tool_use, ToolUseBlock) else ToolUseBlock.model_validate(tool_use)


def session_ids(session: Session | str, turn_id: str | None) -> tuple[str, str]:
    """(session_id, turn_id) from a `Session` or a bare session id."""
    if isinstance(session, Session):
        return session.session_id, turn_id or session.turn_id
    return session, turn_id or "t"


def new_turn_id() -> str:
    return f"turn_{uuid.uuid4().hex[:12]}"


def wait_params(wait: float) -> dict[str, Any] | None:
    """The long-poll query (the server caps one poll at 60 s)."""
    return {"wait": min(wait, MAX_POLL_SECONDS)} if wait > 0 else None


def call_path(session_id: str, tool_use_id: str) -> str:
    return f"/v1/sessions/{session_id}/tool-calls/{tool_use_id}"


def auth_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


def tool_use_list(tool_uses: Iterable[ToolUseBlock | dict[str, Any]]) -> list[ToolUseBlock]:
    return [as_block(t) for t in tool_uses]


@dataclass
class SSEParser:
    """Incremental text/event-stream parser (WHATWG rules that parkgate uses)."""

    last_id: str | None = None
    _pending_id: str | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> EventOut | None:
        """One line (without its newline); returns an event at each blank line."""
        if line == "":
            data, self._data, self._event = self._data, [], ""
            if self._pending_id is not None:
                # Committed only with its event, so a cut mid-event resumes before it.
                self.last_id, self._pending_id = self._pending_id, None
            if not data:
                return None
            return EventOut.model_validate(json.loads("\n".join(data)))
        if line.startswith(":"):
            return None  # comment / keep-alive ping
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._pending_id = value
        return None
