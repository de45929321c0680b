"""Slack Web API calls parkgate makes (chat.postMessage, chat.update, response_url),
through slack-sdk's AsyncWebClient / AsyncWebhookClient.

Shared by the Slack activities and the interactivity endpoint. Every failure
becomes SlackError with Slack's error code (never the token). slack-sdk (and
aiohttp under it, ~10 MB) is imported on first use, so an API or worker
without Slack configured never loads it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from parkgate.channels import slack
from parkgate.durable.payloads import SlackMessageRef
from parkgate.settings import Settings
from parkgate.verdicts import ApprovalInfo

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient


class SlackError(Exception):
    """Slack answered ok=false, or could not be reached."""


def web_client(settings: Settings) -> AsyncWebClient:
    from slack_sdk.web.async_client import AsyncWebClient

    return AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url,
                          timeout=10)


async def _call(method: str, coro: Any) -> Any:
    from slack_sdk.errors import SlackApiError, SlackClientError

    try:
        return await coro
    except SlackApiError as exc:
        raise SlackError(f"{method}: {exc.response.get('error')}") from None
    except (SlackClientError, OSError, TimeoutError) as exc:
        raise SlackError(f"{method}: {type(exc).__name__}") from None


async def post_waiting(
    settings: Settings, info: ApprovalInfo, session_id: str, expires_at: datetime | None
) -> SlackMessageRef:
    client = web_client(settings)
    response = await _call("chat.postMessage", client.chat_postMessage(
        channel=settings.slack_channel,
        text=slack.waiting_text(info, session_id),
        blocks=slack.waiting_blocks(info, session_id, expires_at),
        unfurl_links=False,
    ))
    return SlackMessageRef(channel=str(response["channel"]), ts=str(response["ts"]))


async def update_waiting(
    settings: Settings, message: SlackMessageRef, info: ApprovalInfo, session_id: str,
    expires_at: datetime | None, votes: list[str],
) -> None:
    """Show the tally so far, buttons kept (a quorum request still waiting)."""
    client = web_client(settings)
    await _call("chat.update", client.chat_update(
        channel=message.channel, ts=message.ts,
        text=slack.waiting_text(info, session_id),
        blocks=slack.waiting_blocks(info, session_id, expires_at, votes),
    ))


async def update_outcome(
    settings: Settings, message: SlackMessageRef, info: ApprovalInfo, session_id: str,
    text: str,
) -> None:
    """Replace the buttons with the outcome."""
    client = web_client(settings)
    await _call("chat.update", client.chat_update(
        channel=message.channel, ts=message.ts,
        text=f"parkgate: {info.tool_name}: {text}",
        blocks=slack.outcome_blocks(info, session_id, text),
    ))


async def tell_clicker(response_url: str, text: str) -> None:
    """An ephemeral reply only the user who clicked sees (message left as it is)."""
    from slack_sdk.webhook.async_client import AsyncWebhookClient

    client = AsyncWebhookClient(response_url, timeout=10)
    response = await _call("response_url", client.send(
        text=text, response_type="ephemeral", replace_original=False,
    ))
    if response.status_code >= 300:
        raise SlackError(f"response_url answered HTTP {response.status_code}")
