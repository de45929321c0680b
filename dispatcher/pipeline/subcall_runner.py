"""Sub-calls of a composed tool, run inside its execution.

`SubCallRunner` is the ``ToolContext.registry`` a composed tool gets: each
call it makes is classified and executed like a call of its own (see the
class). On the durable path its approver is a `SubCallGate`: a sub-call that
needs a human stops the composed tool (`SubCallParked`) so the workflow can
wait for the decision durably, then runs the tool again with the gate
replaying what its earlier sub-calls returned (see docs/DURABLE.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from parkgate.calls.events import ToolEvent
from parkgate.models import Session, ToolErrorClass, ToolUseBlock, input_hash
from parkgate.pipeline.classification import deny_event, deny_result, run_from_deny
from parkgate.verdicts import Deny, NeedsApproval, PreparedCall, ToolRun, Verdict

#: Decides a sub-call's NeedsApproval (non-atomic composed tools): the prepared
#: call to run (possibly edited) or a Deny.
Approver = Callable[[NeedsApproval], Awaitable["PreparedCall | Deny"]]


#: Where a sub-call's events go (the pipeline's emitter).
Emit = Callable[[ToolEvent], Awaitable[None]]


class SubCallParked(Exception):
    """A sub-call needs a human's decision that is not known yet: the composed
    tool stops here (nothing further runs) and its run is resumed once decided."""

    def __init__(self, sub: NeedsApproval) -> None:
        super().__init__(f"sub-call {sub.prepared.call.id} waits for approval")
        self.sub = sub


class SubCallGate:
    """An approver that remembers: the durable path's gate for one composed run.

    `replay` answers a sub-call that already returned in an earlier run of the
    same composed call (its recorded ToolRun; nothing runs again); `keep`
    records each new one. `__call__` decides a sub-call that needs approval, or
    raises SubCallParked (and `parked` is set: no further sub-call runs).
    """

    parked: NeedsApproval | None = None

    def replay(self, call: ToolUseBlock) -> ToolRun | None:
        return None

    def keep(self, call: ToolUseBlock, run: ToolRun) -> None:
        return None

    async def __call__(self, sub: NeedsApproval) -> PreparedCall | Deny:
        raise NotImplementedError


def step_hash(call: ToolUseBlock) -> str:
    """What a replayed sub-call must match: its tool and input."""
    return input_hash(call.name, call.input)


class SubCallPipeline(Protocol):
    """What a SubCallRunner needs of its pipeline (the Executor is one)."""

    async def classify(
        self, call: ToolUseBlock, session: Session, *, parent_tool_use_id: str | None = None
    ) -> Verdict: ...

    async def execute(
        self,
        prepared: PreparedCall,
        *,
        cancel_event: asyncio.Event | None = None,
        emit: Emit | None = None,
        approver: Approver | SubCallGate | None = None,
    ) -> ToolRun: ...


class SubCallRunner:
    """``ToolContext.registry`` for a composed tool: runs its declared sub-tools.

    Each sub-call is classified (validated, scoped, policy-checked) and executed
    with the parent's cancel event; its events carry ``parent_tool_use_id`` and
    a distinct tool_use_id ``<parent>.<n>``. An atomic parent's approval covers
    sub-calls that would prompt (never those policy denies); a non-atomic
    parent sends them to ``approver`` (or refuses them when there is none).

    With a `SubCallGate`, sub-calls run one at a time (so a park leaves none
    running) and each one's ToolRun is kept for a resumed run.
    """

    def __init__(
        self,
        pipeline: SubCallPipeline,
        parent: PreparedCall,
        cancel_event: asyncio.Event,
        emit: Emit | None,
        approver: Approver | SubCallGate | None,
    ) -> None:
        self.pipeline = pipeline
        self.parent = parent
        self.cancel_event = cancel_event
        self.emit = emit
        self.approver = approver
        self._seq = 0
        self._one_at_a_time = asyncio.Lock()

    async def _deny(self, call: ToolUseBlock, deny: Deny) -> ToolRun:
        if self.emit is not None:
            await self.emit(
                deny_event(call, self.parent.session, deny, parent_tool_use_id=self.parent.call.id)
            )
        return run_from_deny(deny)

    async def execute(self, name: str, input: dict[str, Any]) -> ToolRun:
        self._seq += 1
        call = ToolUseBlock(id=f"{self.parent.call.id}.{self._seq}", name=name, input=input)
        gate = self.approver if isinstance(self.approver, SubCallGate) else None
        if gate is None:
            return await self._run(call, name)
        async with self._one_at_a_time:
            if gate.parked is not None:  # the composed tool went on after a park
                raise SubCallParked(gate.parked)
            replayed = gate.replay(call)
            if replayed is not None:
                return replayed
            run = await self._run(call, name)
            gate.keep(call, run)
            return run

    async def _run(self, call: ToolUseBlock, name: str) -> ToolRun:
        parent_def = self.parent.definition
        if name not in (parent_def.composed_of or []):
            return await self._deny(
                call,
                deny_result(
                    call.id,
                    ToolErrorClass.PERMISSION_DENIED,
                    f"Permission denied: composed tool '{parent_def.name}' may not call '{name}' "
                    f"(not declared in composed_of {parent_def.composed_of})",
                    rule="composition:undeclared",
                ),
            )
        if self.cancel_event.is_set():
            return await self._deny(
                call,
                deny_result(
                    call.id, ToolErrorClass.CANCELLED, "Tool call cancelled.", rule="cancelled"
                ),
            )
        verdict = await self.pipeline.classify(
            call, self.parent.session, parent_tool_use_id=self.parent.call.id
        )
        if isinstance(verdict, Deny):
            return await self._deny(call, verdict)
        if isinstance(verdict, NeedsApproval):
            if parent_def.atomic:
                prepared = verdict.prepared.model_copy(
                    update={
                        "rule": f"atomic:{parent_def.name} approval covers {verdict.prepared.rule}"
                    }
                )
            elif self.approver is not None:
                outcome = await self.approver(verdict)
                if isinstance(outcome, Deny):
                    return await self._deny(call, outcome)
                prepared = outcome
            else:
                return await self._deny(
                    call,
                    deny_result(
                        call.id,
                        ToolErrorClass.PERMISSION_DENIED,
                        f"Sub-call {name!r} needs approval ({verdict.prepared.rule}) "
                        "and no approver is available on this path",
                        rule=verdict.prepared.rule,
                    ),
                )
        else:
            prepared = verdict.prepared
        return await self.pipeline.execute(
            prepared, cancel_event=self.cancel_event, emit=self.emit, approver=self.approver
        )
