"""Sub-calls of a composed tool, run inside its execution.

`SubCallRunner` is the ``ToolContext.registry`` a composed tool gets: each
call it makes is classified and executed like a call of its own (see the
class). Not to be confused with the durable path's parking of a sub-call
that needs approval (parkgate.activities.subcall_approver) or the ids and
decisions of such approvals (parkgate.durable.subcall_approvals).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from parkgate.calls.events import ToolEvent
from parkgate.models import Session, ToolErrorClass, ToolUseBlock
from parkgate.pipeline.classification import deny_event, deny_result, run_from_deny
from parkgate.verdicts import Deny, NeedsApproval, PreparedCall, ToolRun, Verdict

#: Decides a sub-call's NeedsApproval (non-atomic composed tools): the prepared
#: call to run (possibly edited) or a Deny.
Approver = Callable[[NeedsApproval], Awaitable["PreparedCall | Deny"]]


#: Where a sub-call's events go (the pipeline's emitter).
Emit = Callable[[ToolEvent], Awaitable[None]]


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
        approver: Approver | None = None,
    ) -> ToolRun: ...


class SubCallRunner:
    """``ToolContext.registry`` for a composed tool: runs its declared sub-tools.

    Each sub-call is classified (validated, scoped, policy-checked) and executed
    with the parent's cancel event; its events carry ``parent_tool_use_id`` and
    a distinct tool_use_id ``<parent>.<n>``. An atomic parent's approval covers
    sub-calls that would prompt (never those policy denies); a non-atomic
    parent sends them to ``approver`` (or refuses them when there is none).
    """

    def __init__(
        self,
        pipeline: SubCallPipeline,
        parent: PreparedCall,
        cancel_event: asyncio.Event,
        emit: Emit | None,
        approver: Approver | None,
    ) -> None:
        self.pipeline = pipeline
        self.parent = parent
        self.cancel_event = cancel_event
        self.emit = emit
        self.approver = approver
        self._seq = 0

    async def _deny(self, call: ToolUseBlock, deny: Deny) -> ToolRun:
        if self.emit is not None:
            await self.emit(
                deny_event(call, self.parent.session, deny, parent_tool_use_id=self.parent.call.id)
            )
        return run_from_deny(deny)

    async def execute(self, name: str, input: dict[str, Any]) -> ToolRun:
        self._seq += 1
        parent_def = self.parent.definition
        call = ToolUseBlock(id=f"{self.parent.call.id}.{self._seq}", name=name, input=input)
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
