"""The blocking client (same methods as the async one, for scripts and threads)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import httpx

from parkgate.agent_client import _common as c
from parkgate.agent_client._core import ClientBase, Decision
from parkgate.agent_client._gate_common import Claim, NoticeHandler, Outcome
from parkgate.agent_client.client_tools import ClientToolDefinition
from parkgate.calls.wire import (
    CallResource,
    CancelOut,
    ConfirmationOut,
    EventOut,
    SessionOut,
    ToolsOut,
)
from parkgate.models import Session, ToolDefinition, ToolResultBlock, ToolUseBlock

T = TypeVar("T")


class ParkgateClient(ClientBase):
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
        on_notice: NoticeHandler | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retry_for, max_retries, own=http is None,
                         on_notice=on_notice)
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)

    def __enter__(self) -> ParkgateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self.http.close()

    # ------------------------------------------------------------ transport
    def _drive(self, flow: c.Flow[T]) -> T:
        """Do what a shared flow (`_core`) asks, blocking."""
        run = c.Run(flow)
        while (op := run.next()) is not None:
            try:
                run.sent = self._do(op)
            except Exception as exc:
                run.failed(exc)
        return run.result

    def _do(self, op: c.Op) -> Any:
        if isinstance(op, c.Sleep):
            return time.sleep(op.seconds)
        if isinstance(op, c.Gather):
            return [self._drive(flow) for flow in op.flows]  # one after the other
        assert isinstance(op, c.Send)
        return self.http.request(op.method, op.path, json=op.json, params=op.params,
                                 headers=op.headers)

    def _request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """One API request, retried through outages (see `_common.Retry`); any other
        non-2xx raises the typed error."""
        return self._drive(self._core.request(method, path, json=json, params=params,
                                              deadline=deadline))

    # ------------------------------------------------------------- sessions
    def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"] = "main",
        *, worker_group: str | None = None,
        client_tools: Sequence[ClientToolDefinition] | None = None,
    ) -> SessionOut:
        return self._drive(self._core.register_session(
            session_id, workspace_path, kind, worker_group, client_tools))

    def tools(
        self, session_id: str, format: Literal["canonical", "openai", "anthropic"] = "canonical"
    ) -> ToolsOut:
        return self._drive(self._core.tools(session_id, format))

    def get_definitions_for_session(self, session: Session | str) -> list[ToolDefinition]:
        return self._drive(self._core.definitions(session))

    # ---------------------------------------------------------------- calls
    def submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, wait: float = 0, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        return self._drive(self._core.submit(tool_use, session, turn_id, wait, None, claim,
                                             lease_seconds))

    def get_call(self, session_id: str, tool_use_id: str, *, wait: float = 0) -> CallResource:
        return self._drive(self._core.get_call(session_id, tool_use_id, wait, None))

    def wait_call(
        self, session_id: str, tool_use_id: str, *, timeout: float | None = None
    ) -> CallResource:
        return self._drive(self._core.wait_call(session_id, tool_use_id,
                                                c.deadline_after(timeout)))

    def dispatch(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> ToolResultBlock:
        return self._drive(self._core.dispatch(tool_use, session, turn_id, timeout))

    def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> list[ToolResultBlock]:
        return self._drive(self._core.dispatch_all(tool_uses, session, turn_id, timeout))

    # ------------------------------------------- client-executed calls (gate)
    def claim(
        self, session_id: str, tool_use_id: str, *, lease_seconds: float | None = None,
    ) -> Claim:
        """Claim a released call to run it here; a lost claim raises ConflictError."""
        return self._drive(self._core.claim(session_id, tool_use_id, lease_seconds))

    def start(self, session_id: str, tool_use_id: str, claim_id: str) -> Claim:
        """Start a claim just before running the call; see AsyncParkgateClient.start."""
        return self._drive(self._core.start(session_id, tool_use_id, claim_id))

    def report_outcome(
        self, session_id: str, tool_use_id: str, content: str | list[dict[str, Any]], *,
        is_error: bool, input_sha256: str, deadline: float | None = None,
    ) -> Outcome:
        """Report what the claimed call did (the same report again is idempotent);
        outages are retried until `deadline` (a `time.monotonic()` value), if given."""
        return self._drive(self._core.report_outcome(
            session_id, tool_use_id, content, is_error, input_sha256, deadline))

    # --------------------------------------------------------- decide, cancel
    def decide(
        self, session_id: str, tool_use_id: str, decision: Decision, *,
        reason: str | None = None, edited_input: dict[str, Any] | None = None,
    ) -> ConfirmationOut:
        return self._drive(self._core.decide(session_id, tool_use_id, decision, reason,
                                             edited_input))

    def cancel(self, session_id: str, tool_use_id: str, *,
               reason: str | None = None) -> CancelOut:
        """Cancel one call; `reason` is recorded with the key's name."""
        return self._drive(self._core.cancel(session_id, tool_use_id, reason))

    def cancel_session_tools(self, session_id: str, *, reason: str | None = None) -> int:
        return self._drive(self._core.cancel_session_tools(session_id, reason))

    # ---------------------------------------------------------------- events
    def events(
        self, session_id: str, *, after: int | None = None, follow: bool = True,
    ) -> Iterator[EventOut]:
        stream = self._core.events(session_id, after, follow)
        while True:
            try:
                with self.http.stream(**stream.request()) as response:
                    if stream.refused(response):
                        response.read()
                        time.sleep(stream.sleep_or_raise(response))
                        continue
                    for line in response.iter_lines():
                        if (event := stream.feed(line)) is not None:
                            yield event
                    if (event := stream.feed(None)) is not None:
                        yield event
                if stream.complete():
                    return
            except c.RETRY_EXCEPTIONS as exc:
                time.sleep(stream.retry.failed(error=exc))
