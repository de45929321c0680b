"""The asyncio client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
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


class AsyncParkgateClient(ClientBase):
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
        on_notice: NoticeHandler | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retry_for, max_retries, own=http is None,
                         on_notice=on_notice)
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)

    async def __aenter__(self) -> AsyncParkgateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    # ------------------------------------------------------------ transport
    async def _drive(self, flow: c.Flow[T]) -> T:
        """Do what a shared flow (`_core`) asks, awaiting each step."""
        run = c.Run(flow)
        while (op := run.next()) is not None:
            try:
                run.sent = await self._do(op)
            except Exception as exc:
                run.failed(exc)
        return run.result

    async def _do(self, op: c.Op) -> Any:
        if isinstance(op, c.Sleep):
            return await asyncio.sleep(op.seconds)
        if isinstance(op, c.Gather):
            return await asyncio.gather(*(self._drive(flow) for flow in op.flows))
        assert isinstance(op, c.Send)
        return await self.http.request(op.method, op.path, json=op.json, params=op.params,
                                       headers=op.headers)

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """One API request, retried through outages (see `_common.Retry`); any other
        non-2xx raises the typed error."""
        return await self._drive(self._core.request(method, path, json=json, params=params,
                                                    deadline=deadline))

    # ------------------------------------------------------------- sessions
    async def register_session(
        self, session_id: str, workspace_path: str, kind: Literal["main", "worker"] = "main",
        *, worker_group: str | None = None,
        client_tools: Sequence[ClientToolDefinition] | None = None,
    ) -> SessionOut:
        """Register (or re-register, same workspace) a session; 409 -> ConflictError."""
        return await self._drive(self._core.register_session(
            session_id, workspace_path, kind, worker_group, client_tools))

    async def tools(
        self, session_id: str, format: Literal["canonical", "openai", "anthropic"] = "canonical"
    ) -> ToolsOut:
        return await self._drive(self._core.tools(session_id, format))

    async def get_definitions_for_session(self, session: Session | str) -> list[ToolDefinition]:
        """The tools this session may call (what to put in the model's tool list)."""
        return await self._drive(self._core.definitions(session))

    # ---------------------------------------------------------------- calls
    async def submit(
        self, tool_use: ToolUseBlock | dict[str, Any], session: Session | str, *,
        turn_id: str | None = None, wait: float = 0, claim: bool = False,
        lease_seconds: float | None = None,
    ) -> CallResource:
        """Start the call (or attach to it) and long-poll up to `wait` (<= 60) s;
        `claim`: a client tool's call released at once is claimed for this
        request (`claim_won`), see docs/CLIENT_TOOLS.md."""
        return await self._drive(self._core.submit(tool_use, session, turn_id, wait, None,
                                                   claim, lease_seconds))

    async def get_call(self, session_id: str, tool_use_id: str, *, wait: float = 0) -> CallResource:
        return await self._drive(self._core.get_call(session_id, tool_use_id, wait, None))

    async def wait_call(
        self, session_id: str, tool_use_id: str, *, timeout: float | None = None
    ) -> CallResource:
        """Long-poll until the call finishes (or `timeout`), one <= 60 s poll at a time."""
        return await self._drive(self._core.wait_call(session_id, tool_use_id,
                                                      c.deadline_after(timeout)))

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
        return await self._drive(self._core.dispatch(tool_use, session, turn_id, timeout))

    async def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock | dict[str, Any]], session: Session | str, *,
        turn_id: str | None = None, timeout: float | None = None,
    ) -> list[ToolResultBlock]:
        """One assistant message's calls as a turn; results in input order."""
        return await self._drive(self._core.dispatch_all(tool_uses, session, turn_id, timeout))

    # ------------------------------------------- client-executed calls (gate)
    async def claim(
        self, session_id: str, tool_use_id: str, *, lease_seconds: float | None = None,
    ) -> Claim:
        """Claim a released call to run it here; a lost claim raises ConflictError."""
        return await self._drive(self._core.claim(session_id, tool_use_id, lease_seconds))

    async def start(self, session_id: str, tool_use_id: str, claim_id: str) -> Claim:
        """Start a claim (its `claim_id`) just before running the call: its lease
        begins. Until then the claim is a reservation that a restart of this
        client takes over; a reservation lapsed or taken over raises ConflictError
        (do not run the call then)."""
        return await self._drive(self._core.start(session_id, tool_use_id, claim_id))

    async def report_outcome(
        self, session_id: str, tool_use_id: str, content: str | list[dict[str, Any]], *,
        is_error: bool, input_sha256: str, deadline: float | None = None,
    ) -> Outcome:
        """Report what the claimed call did (the same report again is idempotent);
        outages are retried until `deadline` (a `time.monotonic()` value), if given."""
        return await self._drive(self._core.report_outcome(
            session_id, tool_use_id, content, is_error, input_sha256, deadline))

    # --------------------------------------------------------- decide, cancel
    async def decide(
        self, session_id: str, tool_use_id: str, decision: Decision, *,
        reason: str | None = None, edited_input: dict[str, Any] | None = None,
    ) -> ConfirmationOut:
        """Decide a parked call (needs a key with the approver role).

        First decision wins: losing raises ConflictError with `.winner`.
        """
        return await self._drive(self._core.decide(session_id, tool_use_id, decision, reason,
                                                   edited_input))

    async def cancel(self, session_id: str, tool_use_id: str, *,
                     reason: str | None = None) -> CancelOut:
        """Cancel one call; `reason` is recorded with the key's name."""
        return await self._drive(self._core.cancel(session_id, tool_use_id, reason))

    async def cancel_session_tools(self, session_id: str, *, reason: str | None = None) -> int:
        """Cancel every unfinished call of the session; returns how many."""
        return await self._drive(self._core.cancel_session_tools(session_id, reason))

    # ---------------------------------------------------------------- events
    async def events(
        self, session_id: str, *, after: int | None = None, follow: bool = True,
    ) -> AsyncIterator[EventOut]:
        """The session's tool.* events; reconnects with Last-Event-ID after a cut,
        so no event is lost or repeated."""
        stream = self._core.events(session_id, after, follow)
        while True:
            try:
                async with self.http.stream(**stream.request()) as response:
                    if stream.refused(response):
                        await response.aread()
                        await asyncio.sleep(stream.sleep_or_raise(response))
                        continue
                    async for line in response.aiter_lines():
                        if (event := stream.feed(line)) is not None:
                            yield event
                    if (event := stream.feed(None)) is not None:
                        yield event
                if stream.complete():
                    return
            except c.RETRY_EXCEPTIONS as exc:
                await asyncio.sleep(stream.retry.failed(error=exc))
