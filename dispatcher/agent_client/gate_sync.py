"""The blocking gate (same contract as `gate_aio`, for scripts and threads)."""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Generic, Literal, ParamSpec

from parkgate.agent_client import _common as c
from parkgate.agent_client import _gate_common as g
from parkgate.agent_client.client_tools import (
    ClientToolDefinition,
    FunctionSignature,
    content_of,
    definition,
    description_of,
    error_text,
    local_result,
)
from parkgate.agent_client.errors import (
    CallNotFinishedError,
    ConflictError,
    OutcomeNotRecordedError,
    ParkedError,
)
from parkgate.agent_client.sync import ParkgateClient
from parkgate.api.schemas import CallResource
from parkgate.models import SideEffects, ToolResultBlock, ToolUseBlock

P = ParamSpec("P")
#: Runs a released input here; returns the tool's value (or a `Ran`).
Executor = Callable[[dict[str, Any]], Any]


class ToolGate:
    """A session's client tools, and the driver of each of their calls (blocking);
    see AsyncToolGate."""

    def __init__(
        self, client: ParkgateClient, session_id: str, workspace_path: str | None = None,
        *, turn_id: str | None = None, kind: Literal["main", "worker"] = "main",
        lease_seconds: float | None = None,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.workspace_path = workspace_path
        self.turn_id = turn_id
        self.kind: Literal["main", "worker"] = kind
        self.lease_seconds = lease_seconds
        self.tools: dict[str, ClientToolDefinition] = {}
        self._registered: str | None = None  # the declaration last registered
        self._lock = threading.Lock()

    def add(self, tool: ClientToolDefinition) -> ClientToolDefinition:
        self.tools[tool.name] = tool  # the latest declaration stands, as on the server
        return tool

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
        deadline = c.deadline_after(wait)
        tid = tool_use_id or g.new_tool_use_id()
        block = ToolUseBlock(id=tid, name=name, input=dict(tool_input))
        lease = lease_seconds or self.lease_seconds
        # claim: released at once by policy, the call is claimed for this
        # submit in the release's own write (no claim request).
        resource = self.client.submit(block, self.session_id, turn_id=turn_id or self.turn_id,
                                      wait=c.poll_seconds(deadline), claim=True,
                                      lease_seconds=lease)
        # A fresh id with the same tool and input as a still-parked call of the
        # session may attach to that call (setting attach_same_input): its id.
        tid = resource.tool_use_id
        won = g.claim_won(resource)
        if won is not None:
            return self._run(tid, won, execute)
        lost_claim = False
        while True:
            step = g.step_of(resource)
            if step is g.Step.DONE:
                return g.final_result(resource)
            if step is g.Step.CLAIM and not lost_claim:
                try:
                    claim = self.client.claim(self.session_id, tid, lease_seconds=lease)
                except ConflictError as exc:
                    lost_claim = exc.code != g.NOT_RELEASED  # else read again, claim again
                    if not lost_claim:
                        time.sleep(0.5)
                else:
                    return self._run(tid, claim, execute)
                resource = self.client.get_call(self.session_id, tid)
                continue
            if c.passed(deadline):
                if step is not g.Step.DECIDING:
                    raise CallNotFinishedError(resource)
                resource = self._classified(resource)
                if g.step_of(resource) is g.Step.DECIDING:
                    raise ParkedError(resource)
                continue
            if step is g.Step.CLAIM:  # lost: do not spin while the row catches up
                time.sleep(min(0.5, c.poll_seconds(deadline)))
            resource = self.client.get_call(self.session_id, tid, wait=c.poll_seconds(deadline))

    def submit(
        self, name: str, tool_input: Mapping[str, Any], *, tool_use_id: str,
        turn_id: str | None = None,
    ) -> CallResource:
        """Submit (or attach to) a call without running it; see AsyncToolGate.submit."""
        g.require_tool(self.tools, name)
        self.register()
        block = ToolUseBlock(id=tool_use_id, name=name, input=dict(tool_input))
        return self._classified(self.client.submit(
            block, self.session_id, turn_id=turn_id or self.turn_id))

    def _classified(self, resource: CallResource) -> CallResource:
        until = time.monotonic() + g.PROBE_SECONDS
        while resource.status.value == "queued" and time.monotonic() < until:
            time.sleep(0.05)
            resource = self.client.get_call(self.session_id, resource.tool_use_id)
        return resource

    def _run(self, tid: str, claim: g.Claim, execute: Executor) -> ToolResultBlock:
        try:
            value = execute(claim.input)
        except Exception as exc:
            self._report(tid, claim, error_text(exc), True)
            raise
        ran = value if isinstance(value, g.Ran) else g.Ran(content_of(value))
        return self._report(tid, claim, ran.content, ran.is_error)

    def _report(self, tid: str, claim: g.Claim, content: str | list[dict[str, Any]],
                is_error: bool) -> ToolResultBlock:
        local = local_result(tid, content, is_error)
        give_up = g.report_deadline(claim)
        while True:
            try:
                outcome = self.client.report_outcome(
                    self.session_id, tid, content, is_error=is_error,
                    input_sha256=claim.input_sha256,
                    deadline=g.monotonic_deadline(give_up))
            except g.REPORT_FAILURES as exc:
                if datetime.now(UTC) >= give_up:
                    raise OutcomeNotRecordedError(local, exc) from exc
                time.sleep(g.REPORT_RETRY_SECONDS)
                continue
            return g.answer(outcome, local)


class GatedFunction(Generic[P]):
    """A plain function behind the gate (blocking): calling it returns the
    call's result block; see AsyncGatedFunction."""

    def __init__(
        self, fn: Callable[P, Any], tool_gate: ToolGate, *, side_effects: SideEffects | str,
        name: str | None = None, description: str | None = None, wait: float | None = None,
        lease_seconds: float | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"gate: {fn.__name__} is async: gate it with an AsyncParkgateClient")
        self.fn = fn
        self._call: Callable[..., Any] = fn  # called with the released kwargs
        self.tool_gate = tool_gate
        self.signature = FunctionSignature(fn)
        self.definition = tool_gate.add(definition(
            name or fn.__name__, description or description_of(fn), self.signature.schema(),
            side_effects))
        self.wait = wait
        #: The lease asked for when claiming (None: the gate's, else the server's default).
        self.lease_seconds = lease_seconds
        self.__name__ = self.definition.name
        self.__doc__ = fn.__doc__

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
