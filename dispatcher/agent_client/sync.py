"""The blocking client (same methods as the async one, for scripts and threads)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal

import httpx

from parkgate.agent_client import _common as c
from parkgate.agent_client.errors import error_from, not_waiting, result_of
from parkgate.api.schemas import (
    BatchOut,
    CallResource,
    CancelOut,
    ConfirmationOut,
    EventOut,
    SessionCancelOut,
    SessionOut,
    ToolsOut,
)
from parkgate.models import Session, ToolDefinition, ToolResultBlock, ToolUseBlock

Decision = Literal["allow", "deny", "allow_with_edits"]


class ParkgateClient:
    """An agent's handle on a parkgate server (blocking); see AsyncParkgateClient."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 90.0,
        max_retries: int = 8,
        http: httpx.Client | None = None,
    ) -> None:
        self._own = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.headers = c.auth_headers(api_key)
        self.max_retries = max_retries

    def __enter__(self) -> ParkgateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self.http.close()

    # ------------------------------------------------------------ transport
    def _request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self.http.request(
                    method, path, json=json, params=params, headers=self.headers
                )
            except c.RETRY_EXCEPTIONS:
                if attempt >= self.max_retries:
                    raise
            else:
                if response.status_code < 400:
                    return response
                if response.status_code not in c.RETRY_STATUSES or attempt >= self.max_retries:
                    raise error_from(response)
            time.sleep(c.retry_delay(response, attempt))
            attempt += 1

    # ------------------------------------------------------------- sessions
    def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"] = "main",
        *, worker_group: str | None = None,
    ) -> SessionOut:
        body: dict[str, str] = {
            "session_id": session_id, "workspace_path": workspace_path, "kind": kind}
        if worker_group is not None:  # else the server derives it from the workspace
            body["worker_group"] = worker_group
        r = self._request("POST", "/v1/sessions", json=body)
        return SessionOut.model_validate(r.json())

    def tools(
        self, session_id: str, format: Literal["canonical", "openai", "anthropic"] = "canonical"
    ) -> ToolsOut:
        r = self._request("GET", f"/v1/sessions/{session_id}/tools", params={"format": format})
        return ToolsOut.model_validate(r.json())

    def get_definitions_for_session(self, session: Session | str) -> list[ToolDefinition]:
        sid, _ = c.session_ids(session, None)
        return [ToolDefinition.model_validate(t) for t in self.tools(sid).tools]

    # ---------------------------------------------------------------- calls
    def submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, wait: float = 0,
    ) -> CallResource:
        block = c.as_block(tool_use)
        sid, tid = c.session_ids(session, turn_id)
        r = self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls",
            json=block.model_dump(mode="json"),
            params=c.wait_params(wait),
        )
        return CallResource.model_validate(r.json())

    def get_call(self, session_id: str, tool_use_id: str, *, wait: float = 0) -> CallResource:
        r = self._request("GET", c.call_path(session_id, tool_use_id),
                          params=c.wait_params(wait))
        return CallResource.model_validate(r.json())

    def wait_call(
        self, session_id: str, tool_use_id: str, *, timeout: float | None = None
    ) -> CallResource:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = c.MAX_POLL_SECONDS if deadline is None else deadline - time.monotonic()
            resource = self.get_call(session_id, tool_use_id,
                                     wait=max(0.0, min(left, c.MAX_POLL_SECONDS)))
            if resource.finished or (deadline is not None and time.monotonic() >= deadline):
                return resource

    def dispatch(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> ToolResultBlock:
        block = c.as_block(tool_use)
        sid, _ = c.session_ids(session, turn_id)
        first = c.MAX_POLL_SECONDS if timeout is None else min(timeout, c.MAX_POLL_SECONDS)
        started = time.monotonic()
        resource = self.submit(block, session, turn_id=turn_id, wait=first)
        if not resource.finished:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            resource = self.wait_call(sid, block.id, timeout=left)
        return result_of(resource)

    def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> list[ToolResultBlock]:
        blocks = c.tool_use_list(tool_uses)
        sid, tid = c.session_ids(session, turn_id)
        started = time.monotonic()
        first = c.MAX_POLL_SECONDS if timeout is None else min(timeout, c.MAX_POLL_SECONDS)
        r = self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls:batch",
            json={"calls": [b.model_dump(mode="json") for b in blocks]},
            params={"wait": first} if first > 0 else None,
        )
        results = []
        for res in BatchOut.model_validate(r.json()).calls:
            if not res.finished:
                left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
                res = self.wait_call(sid, res.tool_use_id, timeout=left)
            results.append(result_of(res))
        return results

    # --------------------------------------------------------- decide, cancel
    def decide(
        self, session_id: str, tool_use_id: str, decision: Decision, *,
        reason: str | None = None, edited_input: dict[str, Any] | None = None,
    ) -> ConfirmationOut:
        resource = self.get_call(session_id, tool_use_id)
        if resource.request_id is None or resource.turn_id is None:
            raise not_waiting(resource)
        body: dict[str, Any] = {"decision": decision, "reason": reason}
        if edited_input is not None:
            body["edited_input"] = edited_input
        r = self._request(
            "POST",
            f"/v1/sessions/{session_id}/turns/{resource.turn_id}/confirmations/"
            f"{resource.request_id}",
            json=body,
        )
        return ConfirmationOut.model_validate(r.json())

    def cancel(self, session_id: str, tool_use_id: str) -> CancelOut:
        r = self._request("POST", f"{c.call_path(session_id, tool_use_id)}/cancel")
        return CancelOut.model_validate(r.json())

    def cancel_session_tools(self, session_id: str) -> int:
        r = self._request("POST", f"/v1/sessions/{session_id}/cancel")
        return SessionCancelOut.model_validate(r.json()).cancelled

    # ---------------------------------------------------------------- events
    def events(
        self, session_id: str, *, after: int | None = None, follow: bool = True,
    ) -> Iterator[EventOut]:
        parser = c.SSEParser(last_id=str(after) if after is not None else None)
        attempt = 0
        while True:
            headers = dict(self.headers, Accept="text/event-stream")
            if parser.last_id is not None:
                headers["Last-Event-ID"] = parser.last_id
            try:
                with self.http.stream(
                    "GET", f"/v1/sessions/{session_id}/events",
                    params={"follow": "true" if follow else "false"}, headers=headers,
                    timeout=httpx.Timeout(10.0, read=None),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        if (response.status_code not in c.RETRY_STATUSES
                                or attempt >= self.max_retries):
                            raise error_from(response)
                        time.sleep(c.retry_delay(response, attempt))
                        attempt += 1
                        continue
                    attempt = 0
                    got = 0
                    for line in response.iter_lines():
                        event = parser.feed(line.rstrip("\r"))
                        if event is not None:
                            got += 1
                            yield event
                    event = parser.feed("")
                    if event is not None:
                        got += 1
                        yield event
                if not follow and not got:
                    # A stream that ended after events may have been cut: only
                    # an empty answer from Last-Event-ID proves we have them all.
                    return
            except c.RETRY_EXCEPTIONS:
                if attempt >= self.max_retries:
                    raise
                time.sleep(c.retry_delay(None, attempt))
                attempt += 1
