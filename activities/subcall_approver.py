"""Parking a non-atomic composed tool's sub-call inside the execute activity.

The composed tool runs in ONE `parkgate.execute` activity, so a sub-call that
policy prompts for cannot become a workflow of its own. `SubCallApprover` is
the `approver` that activity hands to `Pipeline.execute`; for each such
sub-call it:

1. stores an approval request (deterministic request id, signed link, token
   hash only; `info.parent_tool_use_id` marks it as a sub-call request),
2. emits `tool.confirmation_requested` for the sub-call (its own request id,
   tagged with the parent) and notifies the webhooks, best effort,
3. waits — the activity keeps heartbeating — polling the store until a human
   decides (any path: link, HTTP confirmation endpoint, CLI; first write wins
   in the store), the request expires, or the call is cancelled,
4. emits `tool.confirmation_resolved` and returns the prepared sub-call (allow)
   or a Deny (`user_denied`, `confirmation_timeout`, `cancelled`).

The request expires no later than the parent's own deadline (its tool
timeout and the activity's start-to-close), so a wait can never outlive the
activity that would act on the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from parkgate.activities.plan import approval_expiry
from parkgate.activities.record import approval_url
from parkgate.approvals.links import sign_token, token_hash
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import ApprovalRecord
from parkgate.channels.webhook import WebhookError, deliver
from parkgate.durable.payloads import NotifyInput
from parkgate.durable.subcall_approvals import (
    EXPIRED,
    can_decide,
    sub_call_request_id,
)
from parkgate.models import ToolErrorClass, utcnow
from parkgate.pipeline import Pipeline, deny_result
from parkgate.settings import Settings
from parkgate.verdicts import Deny, NeedsApproval, PreparedCall

if TYPE_CHECKING:
    from parkgate.store.approval_store import ApprovalStore

log = logging.getLogger(__name__)

Emit = Callable[[ToolEvent], Awaitable[None]]

#: Time kept free before the parent's deadline for running the approved sub-call
#: and the rest of the composed tool.
DEADLINE_MARGIN_SECONDS = 5.0
#: A request needs at least this long to be worth asking a human.
MIN_WAIT_SECONDS = 1.0
#: Store polling: start fast (a decision right after the prompt), then back off.
POLL_FIRST, POLL_MAX = 0.2, 1.0


class SubCallApprover:
    """The durable path's approver for one composed call's sub-calls."""

    def __init__(
        self,
        *,
        pipeline: Pipeline,
        settings: Settings,
        store: object,
        emit: Emit,
        cancel_event: asyncio.Event,
        deadline: float,
        workflow_id: str = "",
    ) -> None:
        """`deadline` is a `time.monotonic()` instant after which the parent is
        stopped (its timeout, or the activity's start-to-close)."""
        self.pipeline = pipeline
        self.settings = settings
        self.store = store
        self.emit = emit
        self.cancel_event = cancel_event
        self.deadline = deadline
        self.workflow_id = workflow_id
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ flow
    async def __call__(self, sub: NeedsApproval) -> PreparedCall | Deny:
        call = sub.prepared.call
        if not can_decide(self.store):
            return deny_result(
                call.id,
                ToolErrorClass.PERMISSION_DENIED,
                f"Sub-call {call.name!r} needs approval ({sub.prepared.rule}) and this "
                "worker's history store cannot hold approval requests",
                rule=sub.prepared.rule,
                definition=sub.prepared.definition,
            )
        store = cast("ApprovalStore", self.store)
        if self.cancel_event.is_set():
            return self._cancelled(sub)
        expires_in = self._expires_in(sub)
        if expires_in < MIN_WAIT_SECONDS:
            return deny_result(
                call.id,
                ToolErrorClass.CONFIRMATION_TIMEOUT,
                f"Sub-call {call.name!r} needs approval, but no time is left within the "
                "composed call's timeout to ask for it; it did not run.",
                rule=sub.prepared.rule,
                definition=sub.prepared.definition,
            )
        record, url = self._request(sub, expires_in)
        if not await self._save(record):
            return deny_result(
                call.id,
                ToolErrorClass.EXECUTION_ERROR,
                f"Sub-call {call.name!r} needs approval, but the history store was "
                "unavailable to park it; it did not run.",
                rule=sub.prepared.rule,
                definition=sub.prepared.definition,
            )
        info = sub.info.model_copy(update={"request_id": record.request_id})
        await self.emit(self._requested_event(sub, record))
        self._notify(sub, record, url)
        stored = await self._wait(store, record)
        if stored is None:  # cancelled while waiting
            await self._emit_resolved(sub, record.request_id, "cancelled", None)
            return self._cancelled(sub)
        await self._emit_resolved(sub, record.request_id, stored.decision or EXPIRED, stored)
        if stored.decision in ("allow", "allow_with_edits"):
            return sub.prepared.model_copy(update={"rule": f"confirmation:{info.request_id}"})
        if stored.decision == "deny":
            text = "User denied this operation."
            if stored.reason:
                text += f" Reason: {stored.reason}"
            return deny_result(
                call.id,
                ToolErrorClass.USER_DENIED,
                text,
                rule=f"confirmation:{record.request_id}",
                definition=sub.prepared.definition,
            )
        return deny_result(
            call.id,
            ToolErrorClass.CONFIRMATION_TIMEOUT,
            "No decision before the approval request expired; the sub-call did not run.",
            rule=f"confirmation:{record.request_id}",
            definition=sub.prepared.definition,
        )

    async def close(self) -> None:
        """Stop webhook deliveries still in flight (the activity is ending)."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --------------------------------------------------------------- helpers
    def _expires_in(self, sub: NeedsApproval) -> float:
        """Seconds the request may wait: its configured expiry, capped by the parent."""
        left = self.deadline - time.monotonic() - DEADLINE_MARGIN_SECONDS
        configured = approval_expiry(sub.prepared.definition, self.settings)
        return left if configured is None else min(configured, left)

    def _request(self, sub: NeedsApproval, expires_in: float) -> tuple[ApprovalRecord, str]:
        prepared, session = sub.prepared, sub.prepared.session
        request_id = sub_call_request_id(session.session_id, prepared.call.id)
        requested_at = utcnow()
        expires_at = requested_at + timedelta(seconds=expires_in)
        token = sign_token(self.settings.signing_secret(), request_id, expires_at)
        info = sub.info.model_dump(mode="json") | {
            "request_id": request_id,
            # The approval page shows the sub-call's arguments from here (there is
            # no call row for a sub-call); stored redacted like every input.
            "input": prepared.call.input,
            "workflow_id": self.workflow_id,
        }
        record = ApprovalRecord(
            request_id=request_id,
            session_id=session.session_id,
            turn_id=session.turn_id,
            tool_use_id=prepared.call.id,
            tool_name=prepared.call.name,
            token_hash=token_hash(token),
            input_hash=prepared.input_hash,
            requested_at=requested_at,
            expires_at=expires_at,
            info=info,
        )
        return record, approval_url(self.settings, token)

    async def _save(self, record: ApprovalRecord) -> bool:
        """Store the request, retrying through a store outage until the deadline."""
        delay = 0.5
        while True:
            try:
                await cast("ApprovalStore", self.store).save_approval(record)
                return True
            except Exception:
                log.warning("could not store sub-call approval %s; retrying", record.request_id)
            if self.cancel_event.is_set() or time.monotonic() + delay > self._wait_deadline(
                record
            ):
                return False
            await self._sleep(delay)
            delay = min(delay * 2, 5.0)

    def _wait_deadline(self, record: ApprovalRecord) -> float:
        assert record.expires_at is not None
        return time.monotonic() + (record.expires_at - utcnow()).total_seconds()

    async def _wait(
        self, store: ApprovalStore, record: ApprovalRecord
    ) -> ApprovalRecord | None:
        """Poll until decided or expired; None when cancelled. Expiry is itself a
        first-write-wins decision, so a human who decided at the last instant wins."""
        assert record.expires_at is not None
        interval = POLL_FIRST
        while True:
            if self.cancel_event.is_set():
                return None
            try:
                stored = await store.get_approval(record.request_id)
            except Exception:
                log.debug("polling sub-call approval failed", exc_info=True)
                stored = None
            if stored is not None and stored.decision is not None:
                return stored
            if utcnow() >= record.expires_at:
                try:
                    _, stored = await store.decide_approval(
                        record.request_id, EXPIRED, None, "expiry", "no decision before expiry"
                    )
                    return stored
                except Exception:
                    log.warning("could not record the expiry of %s", record.request_id)
                    return record.model_copy(update={"decision": EXPIRED})
            await self._sleep(interval)
            interval = min(interval * 1.5, POLL_MAX)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, waking early on cancellation."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.cancel_event.wait(), timeout=seconds)

    def _cancelled(self, sub: NeedsApproval) -> Deny:
        return deny_result(
            sub.prepared.call.id,
            ToolErrorClass.CANCELLED,
            "The call was cancelled before this sub-call ran.",
            rule="cancelled",
            definition=sub.prepared.definition,
        )

    def _requested_event(self, sub: NeedsApproval, record: ApprovalRecord) -> ToolEvent:
        info = sub.info
        return self.pipeline.event(
            sub.prepared,
            "tool.confirmation_requested",
            at=record.requested_at,
            request_id=record.request_id,
            # No approval URL: only the token's hash is stored; readers re-derive it.
            data={
                "input_summary": info.input_summary,
                "projected_impact": list(info.projected_impact),
                "rule": info.rule,
                "input_hash": info.input_hash,
                "expires_at": record.expires_at.isoformat() if record.expires_at else None,
                "diff": info.diff,
                "files": list(info.files),
                "mode": info.mode,
                "workflow_id": self.workflow_id,
            },
        )

    async def _emit_resolved(
        self,
        sub: NeedsApproval,
        request_id: str,
        decision: str,
        stored: ApprovalRecord | None,
    ) -> None:
        data: dict[str, Any] = {
            "decision": decision,
            "decided_by": stored.decided_by if stored else None,
            "via": stored.via if stored else None,
            "reason": stored.reason if stored else None,
        }
        if stored is not None and stored.identity is not None:
            # How the decider was identified (parkgate.approvals.identity), with the principal
            # it names, so `audit verify` can hold the event to the approval row.
            data |= {"principal_id": stored.principal_id, "identity": stored.identity}
        await self.emit(
            self.pipeline.event(
                sub.prepared,
                "tool.confirmation_resolved",
                request_id=request_id,
                data={k: v for k, v in data.items() if v is not None},
            )
        )

    def _notify(self, sub: NeedsApproval, record: ApprovalRecord, url: str) -> None:
        """Announce the request to the configured webhooks (one try each; a
        failure is logged and never blocks the sub-call)."""
        if not self.settings.webhooks:
            return
        notice = NotifyInput(
            info=sub.info.model_copy(update={"request_id": record.request_id}),
            session=sub.prepared.session,
            approval_url=url,
            requested_at=record.requested_at,
            expires_at=record.expires_at,
        )

        async def send() -> None:
            import httpx  # here: a worker without webhooks never loads it (~7 MB)

            async with httpx.AsyncClient() as client:
                for index, hook in enumerate(self.settings.webhooks):
                    try:
                        await deliver(client, hook, notice, timeout=10.0)
                    except WebhookError as exc:
                        log.warning("webhook[%d] for sub-call request failed: %s", index, exc)

        task = asyncio.create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
