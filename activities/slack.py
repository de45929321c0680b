"""Slack activities: post a parked call's interactive message, and show its outcome.

`parkgate.slack_post` runs beside the webhook/e-mail notice (the workflow does
not wait on it) and returns where the message is; the workflow keeps that
reference (a channel id and a timestamp, not secret) and, when the call ends,
starts `parkgate.SlackOutcome`, which runs `parkgate.slack_outcome` to replace
the buttons with the outcome, whichever way the call ended. Slack errors are
retryable failures (Temporal retries with backoff).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dispatcher import slack, slack_web
from dispatcher.durable_models import (
    ACT_SLACK_OUTCOME,
    ACT_SLACK_POST,
    NotifyInput,
    SlackMessageRef,
    SlackOutcomeInput,
)
from dispatcher.settings import Settings


class SlackActivities:
    """Holds the settings (bot token, channel, API base URL); one per worker."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name=ACT_SLACK_POST)
    async def post(self, req: NotifyInput) -> SlackMessageRef:
        try:
            return await slack_web.post_waiting(
                self.settings, req.info, req.session.session_id, req.expires_at)
        except slack_web.SlackError as exc:
            raise ApplicationError(str(exc), type="SlackError") from None

    @activity.defn(name=ACT_SLACK_OUTCOME)
    async def outcome(self, req: SlackOutcomeInput) -> None:
        try:
            await slack_web.update_outcome(
                self.settings, req.message, req.info, req.session_id,
                slack.outcome_text(req.status, req.decision))
        except slack_web.SlackError as exc:
            raise ApplicationError(str(exc), type="SlackError") from None
