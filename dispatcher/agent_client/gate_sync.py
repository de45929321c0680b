"""The blocking gate (same contract as `gate_aio`, for scripts and threads)."""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, ParamSpec, TypeVar

from parkgate.agent_client import _common as c
from parkgate.agent_client import _gate_common as g
from parkgate.agent_client.sync import ParkgateClient
from parkgate.calls.wire import CallResource
from parkgate.models import SideEffects, ToolResultBlock

P = ParamSpec("P")
T = TypeVar("T")
#: Runs a released input here; returns the tool's value (or a `Ran`).
Executor = Callable[[dict[str, Any]], Any]


class ToolGate(g.GateBase):
    """A session's client tools, and the driver of each of their calls (blocking);
    see AsyncToolGate."""

    def __init__(
        self, client: ParkgateClient, session_id: str, workspace_path: str | None = None,
        *, turn_id: str | None = None, kind: Literal["main", "worker"] = "main",
        lease_seconds: float | None = None,
    ) -> None:
        super().__init__(session_id, workspace_path, turn_id, kind, lease_seconds)
        self.client = client
        self._lock = threading.Lock()

    def gate(
        self, fn: Callable[P, Any] | None = None, /, *, side_effects: SideEffects | str,
        name: str | None = None, description: str | None = None, wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> Any:
        def wrap(f: Callable[P, Any]) -> GatedFunction[P]:
            return GatedFunction(f, self, side_effects=side_effects, name=name,
                                 description=description, wait=wait,
                                      lease_seconds=lease_seconds)
        return wrap if fn is None else wrap(fn)

    def register(self) -> None:
        with self._lock:
            tools, current = g.declaration(self.tools)
            if current == self._registered:
                return
            self.client.register_session(
                self.session_id, self.workspace_path or os.getcwd(), self.kind,
                client_tools=tools)
            self._registered = current

    def call(
        self, name: str, tool_input: Mapping[str, Any], execute: Executor, *,
        tool_use_id: str | None = None, turn_id: str | None = None,
        wait: float | None = None, lease_seconds: float | None = None,
    ) -> ToolResultBlock:
        g.require_tool(self.tools, name)
        self.register()
        block = c.tool_use_block(tool_use_id or g.new_tool_use_id(), name, tool_input)
        announce = g.Announcer(name, g.inbox_url(self.client.where), self.client.on_notice)
        return self._drive(g.call_flow(self.session_id, block, turn_id or self.turn_id,
                                       c.deadline_after(wait), lease_seconds or self.lease_seconds,
                                       announce), execute)

    def submit(
        self, name: str, tool_input: Mapping[str, Any], *, tool_use_id: str,
        turn_id: str | None = None,
    ) -> CallResource:
        """Submit (or attach to) a call without running it; see AsyncToolGate.submit."""
        g.require_tool(self.tools, name)
        self.register()
        block = c.tool_use_block(tool_use_id, name, tool_input)
        return self._drive(g.classified_flow(self.session_id, self.client.submit(
            block, self.session_id, turn_id=turn_id or self.turn_id)))

    def _drive(self, flow: c.Flow[T], execute: Executor | None = None) -> T:
        """Do what a shared flow (`_gate_common`) asks, blocking."""
        run = c.Run(flow)
        while (op := run.next()) is not None:
            try:
                run.sent = self._do(op, execute)
            except Exception as exc:
                run.failed(exc)
        return run.result

    def _do(self, op: c.Op, execute: Executor | None) -> Any:
        if isinstance(op, c.Sleep):
            return time.sleep(op.seconds)
        if isinstance(op, c.Execute):
            assert execute is not None  # only a call's flow runs the function
            return execute(op.input)
        assert isinstance(op, c.Use)
        return op.on(self.client)


class GatedFunction(g.GatedBase, Generic[P]):
    """A plain function behind the gate (blocking): calling it returns the
    call's result block; see AsyncGatedFunction."""

    def __init__(
        self, fn: Callable[P, Any], tool_gate: ToolGate, *, side_effects: SideEffects | str,
        name: str | None = None, description: str | None = None, wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"gate: {fn.__name__} is async: gate it with an AsyncParkgateClient")
        super().__init__(fn, tool_gate, side_effects, name, description, wait, lease_seconds)
        self.tool_gate = tool_gate

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> ToolResultBlock:
        return self.call(self.signature.to_input(args, kwargs))

    def call(
        self, tool_input: Mapping[str, Any], *, tool_use_id: str | None = None,
        turn_id: str | None = None, wait: float | None = None,
    ) -> ToolResultBlock:
        return self.tool_gate.call(
            self.definition.name, tool_input, self._execute, tool_use_id=tool_use_id,
            turn_id=turn_id, wait=self.wait if wait is None else wait,
            lease_seconds=self.lease_seconds)

    def _execute(self, released: dict[str, Any]) -> Any:
        return self._call(**self.signature.to_kwargs(released))
