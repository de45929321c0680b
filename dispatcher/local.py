"""The in-process ToolDispatcher: classify -> (prompt and wait) -> execute.

This is the spec's dispatcher API without Temporal. Confirmations are
resolved by ``resolve_confirmation`` (first write wins); a prompt that nobody
answers ends as ``confirmation_timeout``. Events go to ``on_event`` callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from parkgate.approvals.decisions import DECISIONS, Decision
from parkgate.calls.events import ToolEvent
from parkgate.models import (
    Session,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolResultBlock,
    ToolUseBlock,
)
from parkgate.pipeline import Pipeline, deny_event, deny_result
from parkgate.registry import ToolFactory, ToolRegistry
from parkgate.rules.call_caps import Budget
from parkgate.rules.hooks import maybe_await
from parkgate.rules.policy import ConfirmationPolicy
from parkgate.truncation import Limits
from parkgate.verdicts import ApprovalInfo, Deny, NeedsApproval, PreparedCall

log = logging.getLogger("parkgate.local")

EventCallback = Callable[[ToolEvent], Any]


class ConfirmationDecision(BaseModel):
    """How a confirmation request ended (a human decision, a timeout or a cancel).

    In-process only: not a `parkgate.approvals.decisions` shape, because its `decision`
    also says "timeout" and "cancelled", and the local dispatcher knows no
    principal or channel. Its dump is the data of tool.confirmation_resolved.
    """

    decision: str  # allow | deny | allow_with_edits | timeout | cancelled
    reason: str | None = None
    decided_by: str | None = None
    edited_input: dict[str, Any] | None = None


@dataclass
class _Pending:
    info: ApprovalInfo
    prepared: PreparedCall
    future: asyncio.Future[ConfirmationDecision]


@dataclass(eq=False)
class _InFlight:
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)


class ToolDispatcher:
    """Registers tools and dispatches ToolUseBlocks to them, in this process."""

    def __init__(
        self,
        policy: ConfirmationPolicy | None = None,
        *,
        confirmation_timeout: float = 300.0,
        concurrency: int = 4,
        limits: Limits | None = None,
        hooks: Iterable[Any] = (),
        budget: Budget | None = None,
        registry: ToolRegistry | None = None,
        tools: Iterable[ToolFactory] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.registry = registry if registry is not None else ToolRegistry()
        self.pipeline = Pipeline(self.registry, policy, hooks=hooks, budget=budget, limits=limits)
        self.confirmation_timeout = confirmation_timeout
        self.concurrency = concurrency
        self._callbacks: list[EventCallback] = []
        self._pending: dict[str, _Pending] = {}
        self._decided: OrderedDict[str, ConfirmationDecision] = OrderedDict()
        self._inflight: dict[str, set[_InFlight]] = defaultdict(set)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._remembered: set[tuple[str, str]] = set()
        for factory in tools:
            self.register(factory)

    # ---------------------------------------------------------------- registry
    @property
    def policy(self) -> ConfirmationPolicy:
        return self.pipeline.policy

    def register(self, tool_factory: ToolFactory) -> ToolDefinition:
        """Register a tool factory (validated; see ToolRegistry.register)."""
        return self.registry.register(tool_factory)

    def unregister(self, tool_name: str) -> None:
        self.registry.unregister(tool_name)

    def get_definitions_for_session(self, session: Session) -> list[ToolDefinition]:
        return self.registry.definitions_for(session)

    # ------------------------------------------------------------------ events
    def on_event(self, callback: EventCallback) -> Callable[[], None]:
        """Subscribe to tool.* events (sync or async callback); returns an unsubscribe."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unsubscribe

    async def _emit(self, event: ToolEvent) -> None:
        for callback in list(self._callbacks):
            try:
                await maybe_await(callback(event))
            except Exception:
                log.exception("event callback failed on %s", event.type)

    # ---------------------------------------------------------------- dispatch
    async def dispatch(self, tool_use: ToolUseBlock, session: Session) -> ToolResultBlock:
        """Classify, confirm if needed, execute; always returns a ToolResultBlock."""
        state = _InFlight()
        self._inflight[session.session_id].add(state)
        try:
            return await self._dispatch(tool_use, session, state)
        except Exception:
            log.exception("dispatch of %s (%s) failed unexpectedly", tool_use.name, tool_use.id)
            return ToolResultBlock(
                tool_use_id=tool_use.id,
                content=[
                    TextBlock(
                        text=f"Tool '{tool_use.name}' failed with an internal "
                        "error; details are in the server log."
                    )
                ],
                is_error=True,
                error_class=ToolErrorClass.EXECUTION_ERROR,
            )
        finally:
            state.done.set()
            calls = self._inflight.get(session.session_id)
            if calls is not None:
                calls.discard(state)
                if not calls:
                    del self._inflight[session.session_id]

    async def _dispatch(
        self, tool_use: ToolUseBlock, session: Session, state: _InFlight
    ) -> ToolResultBlock:
        verdict = await self.pipeline.classify(tool_use, session)
        if isinstance(verdict, Deny):
            await self._emit(deny_event(tool_use, session, verdict))
            return verdict.result
        if isinstance(verdict, NeedsApproval):
            outcome = await self._confirm(verdict, state.cancel_event)
            if isinstance(outcome, Deny):
                await self._emit(deny_event(verdict.prepared.call, session, outcome))
                return outcome.result
            prepared = outcome
        else:
            prepared = verdict.prepared

        async def approver(sub: NeedsApproval) -> PreparedCall | Deny:
            return await self._confirm(sub, state.cancel_event)

        async with self._slot(session.session_id):
            run = await self.pipeline.execute(
                prepared, cancel_event=state.cancel_event, emit=self._emit, approver=approver
            )
        return run.result

    async def dispatch_all(
        self, tool_uses: Iterable[ToolUseBlock], session: Session
    ) -> list[ToolResultBlock]:
        """Dispatch one message's calls concurrently (capped per session), in input order."""
        return list(await asyncio.gather(*(self.dispatch(tu, session) for tu in tool_uses)))

    def _slot(self, session_id: str) -> asyncio.Semaphore:
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = asyncio.Semaphore(self.concurrency)
        return slot

    async def cancel_session_tools(self, session_id: str) -> int:
        """Cancel every in-flight (or awaiting-confirmation) call of a session.

        Returns once they have ended (bounded by the cancel grace period), with the
        number of calls cancelled.
        """
        calls = list(self._inflight.get(session_id, ()))
        for state in calls:
            state.cancel_event.set()
        if calls:
            waits = [asyncio.create_task(s.done.wait()) for s in calls]
            _, pending = await asyncio.wait(
                waits, timeout=self.pipeline.limits.cancel_grace_seconds + 5
            )
            for task in pending:
                task.cancel()
        return len(calls)

    # ----------------------------------------------------------- confirmation
    def pending_confirmations(self) -> list[ApprovalInfo]:
        """Requests waiting for a decision (for UIs and tests)."""
        return [p.info for p in self._pending.values()]

    async def _confirm(
        self, verdict: NeedsApproval, cancel_event: asyncio.Event
    ) -> PreparedCall | Deny:
        info, prepared = verdict.info, verdict.prepared
        session = prepared.session
        key = (session.session_id, info.tool_name)
        if info.mode == "prompt_once" and key in self._remembered:
            return prepared.model_copy(update={"rule": f"{prepared.rule} (remembered)"})
        loop = asyncio.get_running_loop()
        pending = _Pending(info=info, prepared=prepared, future=loop.create_future())
        self._pending[info.request_id] = pending
        await self._emit(
            self.pipeline.event(
                prepared,
                "tool.confirmation_requested",
                request_id=info.request_id,
                data=info.model_dump(mode="json", exclude={"request_id", "tool_name"}),
            )
        )
        waiter = asyncio.create_task(cancel_event.wait())
        watched: set[asyncio.Future[Any]] = {pending.future, waiter}
        try:
            await asyncio.wait(
                watched,
                timeout=self.confirmation_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:  # the dispatching task itself was cancelled
            self._settle(info.request_id, ConfirmationDecision(decision="cancelled"))
            raise
        finally:
            waiter.cancel()
        kind = "cancelled" if cancel_event.is_set() else "timeout"
        decision = self._settle(info.request_id, ConfirmationDecision(decision=kind))
        await self._emit(
            self.pipeline.event(
                prepared,
                "tool.confirmation_resolved",
                request_id=info.request_id,
                data=decision.model_dump(mode="json", exclude={"edited_input"})
                | {"edited": decision.edited_input is not None},
            )
        )
        rule = f"confirmation:{info.request_id}"
        if decision.decision == "allow":
            if info.mode == "prompt_once":
                self._remembered.add(key)
            return prepared
        if decision.decision == "allow_with_edits":
            assert decision.edited_input is not None
            return self.pipeline.revalidate(prepared, decision.edited_input)
        if decision.decision == "deny":
            text = "User denied this operation."
            if decision.reason:
                text += f" Reason: {decision.reason}"
            return deny_result(
                prepared.call.id,
                ToolErrorClass.USER_DENIED,
                text,
                rule=rule,
                definition=prepared.definition,
            )
        if decision.decision == "cancelled":
            return deny_result(
                prepared.call.id,
                ToolErrorClass.CANCELLED,
                "Tool call cancelled while waiting for confirmation.",
                rule=rule,
                definition=prepared.definition,
            )
        return deny_result(
            prepared.call.id,
            ToolErrorClass.CONFIRMATION_TIMEOUT,
            f"No confirmation received within {self.confirmation_timeout:g}s; "
            "the call was not run.",
            rule=rule,
            definition=prepared.definition,
        )

    def _settle(self, request_id: str, decision: ConfirmationDecision) -> ConfirmationDecision:
        """Record ``decision`` unless one already won; return the winner."""
        if request_id in self._decided:
            return self._decided[request_id]
        pending = self._pending.pop(request_id)
        if pending.future.done():
            winner = pending.future.result()
        else:
            pending.future.set_result(decision)
            winner = decision
        self._decided[request_id] = winner
        while len(self._decided) > 10_000:
            self._decided.popitem(last=False)
        return winner

    async def resolve_confirmation(
        self,
        request_id: str,
        decision: Decision | str,
        reason: str | None = None,
        decided_by: str | None = None,
        *,
        edited_input: dict[str, Any] | None = None,
    ) -> str:
        """Decide a pending request; returns the decision that won (first write wins)."""
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {list(DECISIONS)}, not {decision!r}")
        if decision == "allow_with_edits" and edited_input is None:
            raise ValueError("allow_with_edits needs edited_input")
        if request_id in self._decided:
            return self._decided[request_id].decision
        if request_id not in self._pending:
            raise KeyError(f"unknown confirmation request '{request_id}'")
        winner = self._settle(
            request_id,
            ConfirmationDecision(
                decision=decision, reason=reason, decided_by=decided_by, edited_input=edited_input
            ),
        )
        return winner.decision
