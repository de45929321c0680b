"""The asyncio gate: run the agent's own tools behind parkgate, at most once.

One `AsyncToolGate` per (client, session) holds the session's client tools
and registers them; `call` drives one call through submit -> decision ->
claim -> run here -> outcome. See docs/CLIENT_TOOLS.md for the contract.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, ParamSpec, TypeVar

from parkgate.agent_client import _common as c
from parkgate.agent_client import _gate_common as g
from parkgate.agent_client.aio import AsyncParkgateClient
from parkgate.calls.wire import CallResource
from parkgate.models import SideEffects, ToolResultBlock

P = ParamSpec("P")
R = TypeVar("R")
#: Runs a released input here; returns the tool's value (or a `Ran`).
Executor = Callable[[dict[str, Any]], Awaitable[Any]]


class AsyncToolGate(g.GateBase):
    """A session's client tools, and the driver of each of their calls."""

    def __init__(
        self, client: AsyncParkgateClient, session_id: str, workspace_path: str | None = None,
        *, turn_id: str | None = None, kind: Literal["main", "worker"] = "main",
        lease_seconds: float | None = None,
    ) -> None:
        super().__init__(session_id, workspace_path, turn_id, kind, lease_seconds)
        self.client = client
        self._lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ tools
    def gate(
        self, fn: Callable[P, Any] | None = None, /, *, side_effects: SideEffects | str,
        name: str | None = None, description: str | None = None, wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> Any:
        """Decorator (or call form) gating `fn` in this session: see `gate`."""
        def wrap(f: Callable[P, Any]) -> AsyncGatedFunction[P]:
            return AsyncGatedFunction(f, self, side_effects=side_effects, name=name,
                                      description=description, wait=wait,
                                      lease_seconds=lease_seconds)
        return wrap if fn is None else wrap(fn)

    async def register(self) -> None:
        """POST the session with its client tools; again only when tools were added."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            tools, current = g.declaration(self.tools)
            if current == self._registered:
                return
            await self.client.register_session(
                self.session_id, self.workspace_path or os.getcwd(), self.kind,
                client_tools=tools)
            self._registered = current

    # ------------------------------------------------------------ calls
    async def call(
        self, name: str, tool_input: Mapping[str, Any], execute: Executor, *,
        tool_use_id: str | None = None, turn_id: str | None = None,
        wait: float | None = None, lease_seconds: float | None = None,
    ) -> ToolResultBlock:
        """Gate one call of the client tool `name`; `execute` runs the released input.

        Returns the call's result block: the function's, or parkgate's verdict
        (denied, expired, cancelled, outcome_unknown) as an is_error result; the
        function never runs then. `wait` (None: until decided) bounds the wait
        for a decision: then ParkedError. A claim lost to another client never
        runs the function: the call's recorded outcome is the answer. An
        exception in `execute` is reported as is_error and raised again.
        """
        g.require_tool(self.tools, name)
        await self.register()
        block = c.tool_use_block(tool_use_id or g.new_tool_use_id(), name, tool_input)
        # deadline: time.monotonic(), as the client's own waits
        announce = g.Announcer(name, g.inbox_url(self.client.where), self.client.on_notice)
        return await self._drive(g.call_flow(
            self.session_id, block, turn_id or self.turn_id, c.deadline_after(wait),
            lease_seconds or self.lease_seconds, announce), execute)

    async def submit(
        self, name: str, tool_input: Mapping[str, Any], *, tool_use_id: str,
        turn_id: str | None = None,
    ) -> CallResource:
        """Submit (or attach to) a call without running it: its status once
        policy has classified it (parked, released or final). For frameworks
        that ask "does this need approval?" before they run a tool."""
        g.require_tool(self.tools, name)
        await self.register()
        block = c.tool_use_block(tool_use_id, name, tool_input)
        resource = await self.client.submit(block, self.session_id,
                                            turn_id=turn_id or self.turn_id)
        return await self._drive(g.classified_flow(self.session_id, resource))

    async def _drive(self, flow: c.Flow[R], execute: Executor | None = None) -> R:
        """Do what a shared flow (`_gate_common`) asks, awaiting each step."""
        run = c.Run(flow)
        while (op := run.next()) is not None:
            try:
                run.sent = await self._do(op, execute)
            except Exception as exc:
                run.failed(exc)
        return run.result

    async def _do(self, op: c.Op, execute: Executor | None) -> Any:
        if isinstance(op, c.Sleep):
            return await asyncio.sleep(op.seconds)
        if isinstance(op, c.Execute):
            assert execute is not None  # only a call's flow runs the function
            return await execute(op.input)
        assert isinstance(op, c.Use)
        return await op.on(self.client)


class AsyncGatedFunction(g.GatedBase, Generic[P]):
    """A plain function behind the gate: calling it returns the call's result block."""

    def __init__(
        self, fn: Callable[P, Any], tool_gate: AsyncToolGate, *, side_effects: SideEffects | str,
        name: str | None = None, description: str | None = None, wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        super().__init__(fn, tool_gate, side_effects, name, description, wait, lease_seconds)
        self.tool_gate = tool_gate

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> ToolResultBlock:
        """Gate `fn(*args, **kwargs)` under a fresh tool_use_id."""
        return await self.call(self.signature.to_input(args, kwargs))

    async def call(
        self, tool_input: Mapping[str, Any], *, tool_use_id: str | None = None,
        turn_id: str | None = None, wait: float | None = None,
    ) -> ToolResultBlock:
        """Gate one call given as JSON input (e.g. the model's tool_use block).

        Pass the model's `tool_use_id`: an agent that restarts and calls again
        with it attaches to the call instead of starting another.
        """
        return await self.tool_gate.call(
            self.definition.name, tool_input, self._execute, tool_use_id=tool_use_id,
            turn_id=turn_id, wait=self.wait if wait is None else wait,
            lease_seconds=self.lease_seconds)

    async def _execute(self, released: dict[str, Any]) -> Any:
        kwargs = self.signature.to_kwargs(released)
        if inspect.iscoroutinefunction(self.fn):
            return await self._call(**kwargs)
        return await asyncio.to_thread(self._call, **kwargs)
