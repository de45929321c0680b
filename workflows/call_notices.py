"""Notices of a parked call: the webhook, reminders and escalations, Slack.

None of them can block or fail the call: a failed notice is logged; one still
retrying when the call ends is cancelled (patch "cancel-notify-on-end").
Deterministic code only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

from parkgate.workflows.call_record import CallRecording

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

_NOTIFY_SCHEDULE_TO_CLOSE = timedelta(minutes=15)
_NOTIFY_RETRY = RetryPolicy(maximum_attempts=6, maximum_interval=timedelta(minutes=2))

T = TypeVar("T")


class Notices(CallRecording):
    """Mixin of ToolCallWorkflow: who is told of a parked call, and when."""

    async def _stop_background(self) -> None:
        """Cancel a webhook still retrying: the call has ended, its notice is moot.

        Cancelling issues a command, so histories written before this change
        (no "cancel-notify-on-end" marker) replay without it.
        """
        pending = [task for task in self._background if not task.done()]
        if pending and (self._cancel_notify_on_end or self._slack):
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _remind(self, created: ApprovalCreated, parked_at: datetime) -> None:
        """Durable timers while parked: notify again after remind_after_seconds,
        the escalation people after escalate_after_seconds; nothing once the
        call is no longer waiting."""
        info = self._info
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
            await self._notify(created, kind=kind)

    def _not_waiting(self) -> bool:
        return self._decision is not None or self._status != CallStatus.PARKED

    async def _notify(self, created: ApprovalCreated, kind: str = "request") -> None:
        """Run the webhook activity; a failure never blocks or fails the call."""
        info = self._info
        assert info is not None
        notice = NotifyInput(
            info=info,
            session=self._input.session,
            approval_url=created.approval_url,
            requested_at=created.approval.requested_at,
            expires_at=created.approval.expires_at,
            kind=kind,  # type: ignore[arg-type]
        )
        await self._notice(acts.notify, notice, "notify")

    async def _slack_post(self, created: ApprovalCreated) -> None:
        """Post the interactive Slack message; a failure never blocks the call."""
        info = self._info
        assert info is not None
        notice = NotifyInput(info=info, session=self._input.session,
                             requested_at=created.approval.requested_at,
                             expires_at=created.approval.expires_at)
        self._slack_message = await self._notice(acts.slack_post, notice, "slack post")

    async def _notice(
        self, activity: Callable[[NotifyInput], Awaitable[T]], notice: NotifyInput, what: str,
    ) -> T | None:
        """Run one notice activity under the notices' timeouts and retries; a
        failure (or its cancellation when the call ends) is logged, never raised."""
        try:
            return await workflow.execute_activity(
                activity,
                notice,
                schedule_to_close_timeout=_NOTIFY_SCHEDULE_TO_CLOSE,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=_NOTIFY_RETRY,
            )
        except (ActivityError, asyncio.CancelledError) as exc:
            workflow.logger.warning("%s failed for %s: %s", what, notice.info.request_id, exc)
            return None

    async def _slack_outcome(self, outcome: CallOutcome) -> None:
        """Start the child that shows the outcome on the Slack message (it
        outlives this call, so a slow Slack never holds the result)."""
        if self._slack_message is None or self._info is None:
            return
        try:
            await workflow.start_child_workflow(
                SLACK_OUTCOME_WORKFLOW,
                SlackOutcomeInput(message=self._slack_message, info=self._info,
                                  session_id=self._input.session.session_id,
                                  status=outcome.status.value, decision=self._decision),
                id=f"{workflow.info().workflow_id}/slack-outcome",
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError as exc:  # never fails the call
            workflow.logger.warning("slack outcome not started: %s", exc)
