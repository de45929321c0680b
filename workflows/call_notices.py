"""Notices of a parked call: the webhook, reminders and escalations, Slack.

None of them can block or fail the call: a failed notice is logged; one still
retrying when the call ends is cancelled (patch "cancel-notify-on-end").
`Notices` is built with the call's state alone: it writes nothing to the
store and calls no other part. A sub-call's approval sends its webhook under
the same timeouts and retries (NOTIFY_*). Deterministic code only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from parkgate.calls.records import CallStatus
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import (
        SLACK_OUTCOME_WORKFLOW,
        ApprovalCreated,
        CallOutcome,
        NotifyInput,
        SlackOutcomeInput,
    )

if TYPE_CHECKING:
    from parkgate.workflows.call_state import CallState

#: A notice is retried for a quarter of an hour at most, then given up (logged).
NOTIFY_SCHEDULE_TO_CLOSE = timedelta(minutes=15)
NOTIFY_RETRY = RetryPolicy(maximum_attempts=6, maximum_interval=timedelta(minutes=2))

T = TypeVar("T")


class Notices:
    """ToolCallWorkflow's part that tells people of a parked call, and when."""

    def __init__(self, state: CallState) -> None:
        self.state = state

    async def stop_background(self) -> None:
        """Cancel a webhook still retrying: the call has ended, its notice is moot.

        Cancelling issues a command, so histories written before this change
        (no "cancel-notify-on-end" marker) replay without it.
        """
        pending = [task for task in self.state.background if not task.done()]
        if pending and (self.state.cancel_notify_on_end or self.state.slack):
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def remind(self, created: ApprovalCreated, parked_at: datetime) -> None:
        """Durable timers while parked: notify again after remind_after_seconds,
        the escalation people after escalate_after_seconds; nothing once the
        call is no longer waiting."""
        info = self.state.info
        assert info is not None
        steps = sorted((after, kind) for after, kind in (
            (info.remind_after_seconds, "reminder"),
            (info.escalate_after_seconds, "escalation"),
        ) if after)
        for after, kind in steps:
            left = parked_at + timedelta(seconds=after) - workflow.now()
            if left > timedelta(0):
                try:
                    await workflow.wait_condition(self._not_waiting, timeout=left,
                                                  timeout_summary=kind)
                except TimeoutError:
                    pass
            if self._not_waiting():
                return
            await self.notify(created, kind=kind)

    def _not_waiting(self) -> bool:
        return self.state.decision is not None or self.state.status != CallStatus.PARKED

    async def notify(self, created: ApprovalCreated, kind: str = "request") -> None:
        """Run the webhook activity; a failure never blocks or fails the call."""
        info = self.state.info
        assert info is not None
        notice = NotifyInput(
            info=info,
            session=self.state.input.session,
            approval_url=created.approval_url,
            requested_at=created.approval.requested_at,
            expires_at=created.approval.expires_at,
            kind=kind,  # type: ignore[arg-type]
        )
        await self._notice(acts.notify, notice, "notify")

    async def slack_post(self, created: ApprovalCreated) -> None:
        """Post the interactive Slack message; a failure never blocks the call."""
        info = self.state.info
        assert info is not None
        notice = NotifyInput(info=info, session=self.state.input.session,
                             requested_at=created.approval.requested_at,
                             expires_at=created.approval.expires_at)
        self.state.slack_message = await self._notice(acts.slack_post, notice, "slack post")

    async def _notice(
        self, activity: Callable[[NotifyInput], Awaitable[T]], notice: NotifyInput, what: str,
    ) -> T | None:
        """Run one notice activity under the notices' timeouts and retries; a
        failure (or its cancellation when the call ends) is logged, never raised."""
        try:
            return await workflow.execute_activity(
                activity,
                notice,
                schedule_to_close_timeout=NOTIFY_SCHEDULE_TO_CLOSE,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=NOTIFY_RETRY,
            )
        except (ActivityError, asyncio.CancelledError) as exc:
            workflow.logger.warning("%s failed for %s: %s", what, notice.info.request_id, exc)
            return None

    async def slack_outcome(self, outcome: CallOutcome) -> None:
        """Start the child that shows the outcome on the Slack message (it
        outlives this call, so a slow Slack never holds the result)."""
        if self.state.slack_message is None or self.state.info is None:
            return
        try:
            await workflow.start_child_workflow(
                SLACK_OUTCOME_WORKFLOW,
                SlackOutcomeInput(message=self.state.slack_message, info=self.state.info,
                                  session_id=self.state.input.session.session_id,
                                  status=outcome.status.value, decision=self.state.decision),
                id=f"{workflow.info().workflow_id}/slack-outcome",
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError as exc:  # never fails the call
            workflow.logger.warning("slack outcome not started: %s", exc)
