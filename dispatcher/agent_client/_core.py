"""The agent client's logic once, without I/O: each API method as a flow (see
`_common.Run`) that `ParkgateClient` and `AsyncParkgateClient` only drive."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from parkgate.agent_client import _common as c
from parkgate.agent_client._common import Flow, Gather, Send
from parkgate.agent_client._gate_common import Claim, NoticeHandler, Outcome, outcome_body
from parkgate.agent_client.client_tools import ClientToolDefinition
from parkgate.agent_client.errors import error_from, not_waiting, result_of
from parkgate.calls.records import CallStatus
from parkgate.calls.wire import (
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


@dataclass(frozen=True)
class ClientCore:
    """What a client knows (server, key headers, retry bounds) and what each
    of its methods does, as flows."""

    where: str
    headers: dict[str, str]
    retry_for: float | None
    max_retries: int | None

    def retry(self, deadline: float | None = None) -> c.Retry:
        return c.Retry(self.where, deadline, self.retry_for, self.max_retries)

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> Flow[httpx.Response]:
        return c.request_flow(self.retry(deadline), Send(method, path, json, params,
                                                         self.headers))

    # ------------------------------------------------------------- sessions
    def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"],
        worker_group: str | None, client_tools: Sequence[ClientToolDefinition] | None,
    ) -> Flow[SessionOut]:
        body: dict[str, Any] = {
            "session_id": session_id, "workspace_path": workspace_path, "kind": kind}
        if client_tools is not None:  # tools this agent runs itself (parkgate.agent_client.gate)
            body["client_tools"] = [t.wire() for t in client_tools]
        if worker_group is not None:  # else the server derives it from the workspace
            body["worker_group"] = worker_group
        r = yield from self.request("POST", "/v1/sessions", json=body)
        return SessionOut.model_validate(r.json())

    def tools(self, session_id: str, format: str) -> Flow[ToolsOut]:
        r = yield from self.request("GET", f"/v1/sessions/{session_id}/tools",
                                    params={"format": format})
        return ToolsOut.model_validate(r.json())

    def definitions(self, session: Session | str) -> Flow[list[ToolDefinition]]:
        sid, _ = c.session_ids(session, None)
        out = yield from self.tools(sid, "canonical")
        return [ToolDefinition.model_validate(t) for t in out.tools]

    # ---------------------------------------------------------------- calls
    def submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str,
        turn_id: str | None, wait: float, deadline: float | None, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> Flow[CallResource]:
        block = c.as_block(tool_use)
        sid, tid = c.session_ids(session, turn_id)
        r = yield from self.request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls",
            json=block.model_dump(mode="json"),
            params=c.submit_params(wait, claim, lease_seconds), deadline=deadline,
        )
        return CallResource.model_validate(r.json())

    def get_call(
        self, session_id: str, tool_use_id: str, wait: float, deadline: float | None,
    ) -> Flow[CallResource]:
        r = yield from self.request("GET", c.call_path(session_id, tool_use_id),
                                    params=c.wait_params(wait), deadline=deadline)
        return CallResource.model_validate(r.json())

    def wait_call(
        self, session_id: str, tool_use_id: str, deadline: float | None,
    ) -> Flow[CallResource]:
        """Long-poll until the call finishes or `deadline` passes (retrying outages
        until then too)."""
        while True:
            wait = c.poll_seconds(deadline)
            resource = yield from self.get_call(session_id, tool_use_id, wait, deadline)
            if resource.finished or resource.status == CallStatus.RELEASED or c.passed(deadline):
                return resource  # released: the client's turn (a gate), not a wait

    def dispatch(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str,
        turn_id: str | None, timeout: float | None,
    ) -> Flow[ToolResultBlock]:
        block = c.as_block(tool_use)
        sid, _ = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        resource = yield from self.submit(block, session, turn_id, c.poll_seconds(deadline),
                                          deadline)
        if not resource.finished:
            resource = yield from self.wait_call(sid, block.id, deadline)
        return result_of(resource)

    def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str,
        turn_id: str | None, timeout: float | None,
    ) -> Flow[list[ToolResultBlock]]:
        blocks = c.tool_use_list(tool_uses)
        sid, tid = c.session_ids(session, turn_id)
        deadline = c.deadline_after(timeout)
        r = yield from self.request(
            "POST", f"/v1/sessions/{sid}/turns/{tid}/tool-calls:batch",
            json={"calls": [b.model_dump(mode="json") for b in blocks]},
            params=c.wait_params(c.poll_seconds(deadline)), deadline=deadline,
        )
        batch = BatchOut.model_validate(r.json())
        resources = yield Gather([
            self.wait_call(sid, res.tool_use_id, deadline) if not res.finished
            else _done(res) for res in batch.calls
        ])
        return [result_of(res) for res in resources]

    # ------------------------------------------- client-executed calls (gate)
    def claim(
        self, session_id: str, tool_use_id: str, lease_seconds: float | None,
    ) -> Flow[Claim]:
        body = {"lease_seconds": lease_seconds} if lease_seconds is not None else None
        r = yield from self.request("POST", f"{c.call_path(session_id, tool_use_id)}/claim",
                                    json=body)
        return Claim.model_validate(r.json())

    def start(self, session_id: str, tool_use_id: str, claim_id: str) -> Flow[Claim]:
        r = yield from self.request("POST", f"{c.call_path(session_id, tool_use_id)}/start",
                                    json={"claim_id": claim_id})
        return Claim.model_validate(r.json())

    def report_outcome(
        self, session_id: str, tool_use_id: str, content: str | list[dict[str, Any]],
        is_error: bool, input_sha256: str, deadline: float | None,
    ) -> Flow[Outcome]:
        r = yield from self.request("POST", f"{c.call_path(session_id, tool_use_id)}/outcome",
                                    deadline=deadline,
                                    json=outcome_body(content, is_error, input_sha256))
        return Outcome.model_validate(r.json())

    # --------------------------------------------------------- decide, cancel
    def decide(
        self, session_id: str, tool_use_id: str, decision: Decision,
        reason: str | None, edited_input: dict[str, Any] | None,
    ) -> Flow[ConfirmationOut]:
        resource = yield from self.get_call(session_id, tool_use_id, 0, None)
        if resource.request_id is None or resource.turn_id is None:
            raise not_waiting(resource)
        body: dict[str, Any] = {"decision": decision, "reason": reason}
        if edited_input is not None:
            body["edited_input"] = edited_input
        r = yield from self.request(
            "POST",
            f"/v1/sessions/{session_id}/turns/{resource.turn_id}/confirmations/"
            f"{resource.request_id}",
            json=body,
        )
        return ConfirmationOut.model_validate(r.json())

    def cancel(self, session_id: str, tool_use_id: str,
               reason: str | None = None) -> Flow[CancelOut]:
        r = yield from self.request("POST", f"{c.call_path(session_id, tool_use_id)}/cancel",
                                    json=_cancel_body(reason))
        return CancelOut.model_validate(r.json())

    def cancel_session_tools(self, session_id: str, reason: str | None = None) -> Flow[int]:
        r = yield from self.request("POST", f"/v1/sessions/{session_id}/cancel",
                                    json=_cancel_body(reason))
        return SessionCancelOut.model_validate(r.json()).cancelled

    def events(self, session_id: str, after: int | None, follow: bool) -> EventStream:
        return EventStream(self, session_id, follow,
                           c.SSEParser(last_id=str(after) if after is not None else None))


@dataclass
class EventStream:
    """A session's event stream across reconnects (sans-IO): what to open,
    what an answer means, which lines are events, when it is over. Each
    reconnect resumes with Last-Event-ID, so no event is lost or repeated."""

    core: ClientCore
    session_id: str
    follow: bool
    parser: c.SSEParser
    got: int = 0
    retry: c.Retry = field(init=False)

    def __post_init__(self) -> None:
        self.retry = self.core.retry()

    def request(self) -> dict[str, Any]:
        """The next connection's `http.stream(**...)` arguments."""
        self.got = 0
        headers = dict(self.core.headers, Accept="text/event-stream")
        if self.parser.last_id is not None:
            headers["Last-Event-ID"] = self.parser.last_id
        return {"method": "GET", "url": f"/v1/sessions/{self.session_id}/events",
                "params": {"follow": "true" if self.follow else "false"},
                "headers": headers, "timeout": httpx.Timeout(10.0, read=None)}

    def refused(self, response: httpx.Response) -> bool:
        """True: not a stream (read the body, then `sleep_or_raise`)."""
        if response.status_code in c.RETRY_STATUSES:
            return True
        self.retry.answered()
        return response.status_code >= 400

    def sleep_or_raise(self, response: httpx.Response) -> float:
        """A refused stream's (read) answer: seconds to wait before reconnecting,
        or the typed error."""
        if response.status_code in c.RETRY_STATUSES:
            return self.retry.failed(response=response)
        raise error_from(response)

    def feed(self, line: str | None) -> EventOut | None:
        """One line of the stream (None: it ended); an event when one is complete."""
        event = self.parser.feed("" if line is None else line.rstrip("\r"))
        if event is not None:
            self.got += 1
        return event

    def complete(self) -> bool:
        """Not following, the stream ended without events: we have them all. (One
        that ended after events may have been cut: only an empty answer from
        Last-Event-ID proves that.)"""
        return not self.follow and not self.got


class ClientBase:
    """What the sync and async clients hold alike: the server, the key's
    headers, the retry bounds, and the `ClientCore` their flows come from."""

    def __init__(
        self, base_url: str, api_key: str, retry_for: float | None, max_retries: int | None,
        own: bool, on_notice: NoticeHandler | None = None,
    ) -> None:
        self._own = own
        #: Called once when a gated call parks and once when it goes on (see `Notice`).
        self.on_notice = on_notice
        self.headers = c.auth_headers(api_key)
        self.where = base_url
        self.retry_for = retry_for
        self.max_retries = max_retries

    @property
    def _core(self) -> ClientCore:
        return ClientCore(self.where, self.headers, self.retry_for, self.max_retries)

    def _retry(self, deadline: float | None = None) -> c.Retry:
        return self._core.retry(deadline)


def _done(resource: CallResource) -> Flow[CallResource]:
    """A flow that already has its answer (a call the batch found finished)."""
    return resource
    yield  # a generator, for Gather


def _cancel_body(reason: str | None) -> dict[str, str] | None:
    """A cancel's body: the reason recorded beside the key's name (none: no body)."""
    return {"reason": reason} if reason else None
