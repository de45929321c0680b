"""Slack activities: post a parked call's interactive message, and show its outcome.

`parkgate.slack_post` runs beside the webhook/e-mail notice (the workflow does
not wait on it) and returns where the message is; the workflow keeps that
reference (a channel id and a timestamp, not secret) and, when the call ends,
starts `parkgate.SlackOutcome`, which runs `parkgate.slack_outcome` to replace
the buttons with the outcome, whichever way the call ended. Slack errors are
retryable failures (Temporal retries with backoff); a store that does not
answer the post's catch-up is not (a retry would post the message again).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from parkgate.calls.records import HistoryStore
from parkgate.channels import slack, slack_web
from parkgate.durable.payloads import (
    ACT_SLACK_OUTCOME,
    ACT_SLACK_POST,
    NotifyInput,
    SlackMessageRef,
    SlackOutcomeInput,
)
from parkgate.settings import Settings
from parkgate.store.errors import is_unreachable


class SlackActivities:
    """Holds the settings (bot token, channel, API base URL); one per worker."""

    def __init__(self, settings: Settings, store: HistoryStore | None = None) -> None:
        self.settings = settings
        self.store = store

    @activity.defn(name=ACT_SLACK_POST)
    async def post(self, req: NotifyInput) -> SlackMessageRef:
        try:
            ref = await slack_web.post_waiting(
                self.settings, req.info, req.session.session_id, req.expires_at)
            await self._catch_up(ref, req)
        except slack_web.SlackError as exc:
            raise ApplicationError(str(exc), type="SlackError") from None
        return ref

    async def _catch_up(self, ref: SlackMessageRef, req: NotifyInput) -> None:
        """A call that ended while the message was being posted has cancelled this
        activity and will never see `ref`: show its outcome now, from the store
        (the call's final row is written before its workflow ends)."""
        get_call = getattr(self.store, "get_call", None)
        get_approval = getattr(self.store, "get_approval", None)
        if get_call is None or get_approval is None:
            return
        try:
            call = await get_call(req.session.session_id, req.info.tool_use_id)
            if call is None or not call.status.terminal:
                return  # still running: the workflow gets `ref` and shows the end itself
            approval = await get_approval(req.info.request_id)
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            # Failing here would post the message again on every retry (issue 37):
            # the message is posted; only a call that ended meanwhile keeps its
            # buttons, and a click on them is answered from the store.
            activity.logger.warning("store unreachable; %s's Slack message not caught up: %s",
                                    req.info.request_id, type(exc).__name__)
            return
        decision = approval.decision_record() if approval is not None else None
        await slack_web.update_outcome(self.settings, ref, req.info, req.session.session_id,
                                       slack.outcome_text(call.status.value, decision))

    @activity.defn(name=ACT_SLACK_OUTCOME)
    async def outcome(self, req: SlackOutcomeInput) -> None:
        try:
            await slack_web.update_outcome(
                self.settings, req.message, req.info, req.session_id,
                slack.outcome_text(req.status, req.decision))
        except slack_web.SlackError as exc:
            raise ApplicationError(str(exc), type="SlackError") from None
