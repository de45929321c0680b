"""The asyncio client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
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


class AsyncParkgateClient:
    """An agent's handle on a parkgate server (async).

    Every request is safe to resend: a submit with a tool_use id that exists
    attaches to that call, so an agent that restarts and dispatches the same
    block again gets the original call's result, and the tool runs once.

    Outages (refused or dropped connections, 503, 429) are retried for as
    long as the call's own `timeout` allows (default: until it ends);
    `retry_for` (seconds) and `max_retries` (attempts) bound one outage.
    Giving up raises UnavailableError.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 90.0,
        retry_for: float | None = None,
        max_retries: int | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._own = http is None
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self.headers = c.auth_headers(api_key)
        self.where = base_url
        self.retry_for = retry_for
        self.max_retries = max_retries

    async def __aenter__(self) -> AsyncParkgateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    # ------------------------------------------------------------ transport
    def _retry(self, deadline: float | None = None) -> c.Retry:
        return c.Retry(self.where, deadline, self.retry_for, self.max_retries)

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """One API request, retried through outages (see `_common.Retry`); any other
        non-2xx raises the typed error."""
        retry = self._retry(deadline)
        while True:
            try:
                response = await self.http.request(
                    method, path, json=json, params=params, headers=self.headers
                )
            except c.RETRY_EXCEPTIONS as exc:
                await asyncio.sleep(retry.failed(error=exc))
                continue
            if response.status_code in c.RETRY_STATUSES:
                await asyncio.sleep(retry.failed(response=response))
                continue
            retry.answered()
            if response.status_code >= 400:
                raise error_from(response)
            return response

    # ------------------------------------------------------------- sessions
    async def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"] = "main",
        *, worker_group: str | None = None,
        client_tools: Sequence[ClientToolDefinition] | None = None,
    ) -> SessionOut:
        """Register (or re-register, same workspace) a session; 409 -> ConflictError."""
        body: dict[str, Any] = {
            "session_id": session_id, "workspace_path": workspace_path, "kind": kind}
        if client_tools is not None:  # tools this agent runs itself (parkgate.agent_client.gate)
            body["client_tools"] = [t.wire() for t in client_tools]
        if worker_group is not None:  # else the server derives it from the workspace
            body["worker_group"] = worker_group
        r = await self._request("POST", "/v1/sessions", json=body)
        return SessionOut.model_validate(r.json())

    async def tools(
        self, session_id: str, format: Literal["canonical", "openai", "anthropic"] = "canonical"
    ) -> ToolsOut:
        r = await self._request("GET", f"/v1/sessions/{session_id}/tools",
                                params={"format": format})
        return ToolsOut.model_validate(r.json())

    async def get_definitions_for_session(self, session: Session | str) -> list[ToolDefinition]:
        """The tools this session may call (what to put in the model's tool list)."""
        sid, _ = c.session_ids(session, None)
        out = await self.tools(sid)
        return [ToolDefinition.model_validate(t) for t in out.tools]

    # ---------------------------------------------------------------- calls
    async def submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, wait: float = 0, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        """Start the call (or attach to it) and long-poll up to `wait` (<= 60) s;
        `claim`: a client tool's call released at once is claimed for this
        request (`claim_won`), see docs/CLIENT_TOOLS.md."""
        return await self._submit(tool_use, session, turn_id, wait, None, claim, lease_seconds)

    async def _submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str,
        turn_id: str | None, wait: float, deadline: float | None, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        block = c.as_block(tool_use)
        sid, tid = c.session_ids(session, turn_id)
        r = await self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls",
            json=block.model_dump(mode="json"),
            params=c.submit_params(wait, claim, lease_seconds), deadline=deadline,
        )
        return CallResource.model_validate(r.json())

    async def get_call(self, session_id: str, tool_use_id: str, *, wait: float = 0) -> CallResource:
        return await self._get_call(session_id, tool_use_id, wait, None)

    async def _get_call(
        self, session_id: str, tool_use_id: str, wait: float, deadline: float | None,
    ) -> CallResource:
        r = await self._request("GET", c.call_path(session_id, tool_use_id),
                                params=c.wait_params(wait), deadline=deadline)
        return CallResource.model_validate(r.json())

    async def wait_call(
        self, session_id: str, tool_use_id: str, *, timeout: float | None = None
    ) -> CallResource:
        """Long-poll until the call finishes (or `timeout`), one <= 60 s poll at a time."""
        return await self._wait_call(session_id, tool_use_id, c.deadline_after(timeout))

    async def _wait_call(
        self, session_id: str, tool_use_id: str, deadline: float | None,
    ) -> CallResource:
        """Long-poll until the call finishes or `deadline` passes (retrying outages
        until then too)."""
        while True:
            wait = c.poll_seconds(deadline)
            resource = await self._get_call(session_id, tool_use_id, wait, deadline)
            if resource.finished or resource.status == CallStatus.RELEASED or c.passed(deadline):
                return resource  # released: the client's turn (a gate), not a wait

    async def dispatch(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> ToolResultBlock:
        """Run one tool call through the gate and return its result block.

        Waits through a parked call until it is decided (or its approval
        expires), and through server restarts; with `timeout`, raises
        CallNotFinishedError (or UnavailableError, when the server is down
        then) instead of waiting longer; the call goes on, and dispatching the
        same block attaches to it.
        """
        block = c.as_block(tool_use)
        sid, _ = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        resource = await self._submit(block, session, turn_id, c.poll_seconds(deadline), deadline)
        if not resource.finished:
            resource = await self._wait_call(sid, block.id, deadline)
        return result_of(resource)

    async def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> list[ToolResultBlock]:
        """One assistant message's calls as a turn; results in input order."""
        blocks = c.tool_use_list(tool_uses)
        sid, tid = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        r = await self._request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls:batch",
            json={"calls": [b.model_dump(mode="json") for b in blocks]},
            params=c.wait_params(c.poll_seconds(deadline)), deadline=deadline,
        )
        batch = BatchOut.model_validate(r.json())
        resources = await asyncio.gather(*(
            self._wait_call(sid, res.tool_use_id, deadline) if not res.finished
            else _done(res) for res in batch.calls
        ))
        return [result_of(res) for res in resources]

    # ------------------------------------------- client-executed calls (gate)
    async def claim(
        self, session_id: str, tool_use_id: str, *, lease_seconds: float | None = None,
    ) -> Claim:
        """Claim a released call to run it here; a lost claim raises ConflictError."""
        body = {"lease_seconds": lease_seconds} if lease_seconds is not None else None
        r = await self._request("POST", f"{c.call_path(session_id, tool_use_id)}/claim", json=body)
        return Claim.model_validate(r.json())

    async def report_outcome(
        self, session_id: str, tool_use_id: str, content: str | list[dict[str, Any]], *,
        is_error: bool, input_sha256: str, deadline: float | None = None,
    ) -> Outcome:
        """Report what the claimed call did (the same report again is idempotent);
        outages are retried until `deadline` (a `time.monotonic()` value), if given."""
        r = await self._request("POST", f"{c.call_path(session_id, tool_use_id)}/outcome",
                          deadline=deadline,
                                json=outcome_body(content, is_error, input_sha256))
        return Outcome.model_validate(r.json())

    # --------------------------------------------------------- decide, cancel
    async def decide(
        self, session_id: str, tool_use_id: str, decision: Decision, *,
        reason: str | None = None, edited_input: dict[str, Any] | None = None,
    ) -> ConfirmationOut:
        """Decide a parked call (needs a key with the approver role).

        First decision wins: losing raises ConflictError with `.winner`.
        """
        resource = await self.get_call(session_id, tool_use_id)
        if resource.request_id is None or resource.turn_id is None:
            raise not_waiting(resource)
        body: dict[str, Any] = {"decision": decision, "reason": reason}
        if edited_input is not None:
            body["edited_input"] = edited_input
        r = await self._request(
            "POST",
            f"/v1/sessions/{session_id}/turns/{resource.turn_id}/confirmations/"
            f"{resource.request_id}",
            json=body,
        )
        return ConfirmationOut.model_validate(r.json())

    async def cancel(self, session_id: str, tool_use_id: str) -> CancelOut:
        r = await self._request("POST", f"{c.call_path(session_id, tool_use_id)}/cancel")
        return CancelOut.model_validate(r.json())

    async def cancel_session_tools(self, session_id: str) -> int:
        """Cancel every unfinished call of the session; returns how many."""
        r = await self._request("POST", f"/v1/sessions/{session_id}/cancel")
        return SessionCancelOut.model_validate(r.json()).cancelled

    # ---------------------------------------------------------------- events
    async def events(
        self, session_id: str, *, after: int | None = None, follow: bool = True,
    ) -> AsyncIterator[EventOut]:
        """The session's tool.* events; reconnects with Last-Event-ID after a cut,
        so no event is lost or repeated."""
        parser = c.SSEParser(last_id=str(after) if after is not None else None)
        retry = self._retry()
        while True:
            headers = dict(self.headers, Accept="text/event-stream")
            if parser.last_id is not None:
                headers["Last-Event-ID"] = parser.last_id
            try:
                async with self.http.stream(
                    "GET", f"/v1/sessions/{session_id}/events",
                    params={"follow": "true" if follow else "false"}, headers=headers,
                    timeout=httpx.Timeout(10.0, read=None),
                ) as response:
                    if response.status_code in c.RETRY_STATUSES:
                        await response.aread()
                        await asyncio.sleep(retry.failed(response=response))
                        continue
                    retry.answered()
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from(response)
                    got = 0
                    async for line in response.aiter_lines():
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
                await asyncio.sleep(retry.failed(error=exc))


async def _done(resource: CallResource) -> CallResource:
    return resource


