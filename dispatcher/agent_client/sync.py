"""The blocking client (same methods as the async one, for scripts and threads)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal

import httpx

from parkgate.agent_client import _common as c
from parkgate.agent_client._gate_common import Claim, Outcome, outcome_body
from parkgate.agent_client.client_tools import ClientToolDefinition
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
from parkgate.calls.records import CallStatus
from parkgate.models import Session, ToolDefinition, ToolResultBlock, ToolUseBlock

Decision = Literal["allow", "deny", "allow_with_edits"]


class ParkgateClient:
    """An agent's handle on a parkgate server (blocking); see AsyncParkgateClient
    (same methods, same retry policy through server restarts)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 90.0,
        retry_for: float | None = None,
        max_retries: int | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self._own = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.headers = c.auth_headers(api_key)
        self.where = base_url
        self.retry_for = retry_for
        self.max_retries = max_retries

    def __enter__(self) -> ParkgateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self.http.close()

    # ------------------------------------------------------------ transport
    def _retry(self, deadline: float | None = None) -> c.Retry:
        return c.Retry(self.where, deadline, self.retry_for, self.max_retries)

    def _request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """One API request, retried through outages (see `_common.Retry`); any other
        non-2xx raises the typed error."""
        retry = self._retry(deadline)
        while True:
            try:
                response = self.http.request(
                    method, path, json=json, params=params, headers=self.headers
                )
            except c.RETRY_EXCEPTIONS as exc:
                time.sleep(retry.failed(error=exc))
                continue
            if response.status_code in c.RETRY_STATUSES:
                time.sleep(retry.failed(response=response))
                continue
            retry.answered()
            if response.status_code >= 400:
                raise error_from(response)
            return response

    # ------------------------------------------------------------- sessions
    def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"] = "main",
        *, worker_group: str | None = None,
        client_tools: Sequence[ClientToolDefinition] | None = None,
    ) -> SessionOut:
        body: dict[str, Any] = {
            "session_id": session_id, "workspace_path": workspace_path, "kind": kind}
        if client_tools is not None:  # tools this agent runs itself (parkgate.agent_client.gate)
            body["client_tools"] = [t.wire() for t in client_tools]
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
        turn_id: str | None = None, wait: float = 0, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        return self._submit(tool_use, session, turn_id, wait, None, claim, lease_seconds)

    def _submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str,
        turn_id: str | None, wait: float, deadline: float | None, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        block = c.as_block(tool_use)
        sid, tid = c.session_ids(session, turn_id)
        r = self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls",
            json=block.model_dump(mode="json"),
            params=c.submit_params(wait, claim, lease_seconds), deadline=deadline,
        )
        return CallResource.model_validate(r.json())

    def get_call(self, session_id: str, tool_use_id: str, *, wait: float = 0) -> CallResource:
        return self._get_call(session_id, tool_use_id, wait, None)

    def _get_call(
        self, session_id: str, tool_use_id: str, wait: float, deadline: float | None,
    ) -> CallResource:
        r = self._request("GET", c.call_path(session_id, tool_use_id),
                          params=c.wait_params(wait), deadline=deadline)
        return CallResource.model_validate(r.json())

    def wait_call(
        self, session_id: str, tool_use_id: str, *, timeout: float | None = None
    ) -> CallResource:
        return self._wait_call(session_id, tool_use_id, c.deadline_after(timeout))

    def _wait_call(self, session_id: str, tool_use_id: str, deadline: float | None) -> CallResource:
        """Long-poll until the call finishes or `deadline` passes (retrying outages
        until then too)."""
        while True:
            wait = c.poll_seconds(deadline)
            resource = self._get_call(session_id, tool_use_id, wait, deadline)
            if resource.finished or resource.status == CallStatus.RELEASED or c.passed(deadline):
                return resource  # released: the client's turn (a gate), not a wait

    def dispatch(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> ToolResultBlock:
        block = c.as_block(tool_use)
        sid, _ = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        resource = self._submit(block, session, turn_id, c.poll_seconds(deadline), deadline)
        if not resource.finished:
            resource = self._wait_call(sid, block.id, deadline)
        return result_of(resource)

    def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> list[ToolResultBlock]:
        blocks = c.tool_use_list(tool_uses)
        sid, tid = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        r = self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls:batch",
            json={"calls": [b.model_dump(mode="json") for b in blocks]},
            params=c.wait_params(c.poll_seconds(deadline)), deadline=deadline,
        )
        results = []
        for res in BatchOut.model_validate(r.json()).calls:
            if not res.finished:
                res = self._wait_call(sid, res.tool_use_id, deadline)
            results.append(result_of(res))
        return results

    # ------------------------------------------- client-executed calls (gate)
    def claim(
        self, session_id: str, tool_use_id: str, *, lease_seconds: float | None = None,
    ) -> Claim:
        """Claim a released call to run it here; a lost claim raises ConflictError."""
        body = {"lease_seconds": lease_seconds} if lease_seconds is not None else None
        r = self._request("POST", f"{c.call_path(session_id, tool_use_id)}/claim", json=body)
        return Claim.model_validate(r.json())

    def report_outcome(
        self, session_id: str, tool_use_id: str, content: str | list[dict[str, Any]], *,
        is_error: bool, input_sha256: str, deadline: float | None = None,
    ) -> Outcome:
        """Report what the claimed call did (the same report again is idempotent);
        outages are retried until `deadline` (a `time.monotonic()` value), if given."""
        r = self._request("POST", f"{c.call_path(session_id, tool_use_id)}/outcome",
                          deadline=deadline,
                          json=outcome_body(content, is_error, input_sha256))
        return Outcome.model_validate(r.json())

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
        retry = self._retry()
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
                    if response.status_code in c.RETRY_STATUSES:
                        response.read()
                        time.sleep(retry.failed(response=response))
                        continue
                    retry.answered()
                    if response.status_code >= 400:
                        response.read()
                        raise error_from(response)
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
            except c.RETRY_EXCEPTIONS as exc:
                time.sleep(retry.failed(error=exc))
