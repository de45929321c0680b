"""Webhook notifications for parked calls (Slack-compatible and generic JSON).

Payload builders are pure; delivery is an HTTP POST done by the
`parkgate.notify` activity (activities/notify.py), which Temporal retries.
A failing webhook never blocks or loses the call: the workflow does not wait
on the notification to keep the call parked and decidable.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from parkgate.durable.payloads import NotifyInput

# httpx logs every request URL at INFO; webhook URLs (Slack's above all) are
# credentials, so only its warnings are let through.
logging.getLogger("httpx").setLevel(logging.WARNING)

if TYPE_CHECKING:  # httpx does I/O: keep it out of module import
    import httpx

    from parkgate.settings.entries import Webhook


class WebhookError(Exception):
    """A webhook answered non-2xx or could not be reached."""


def _expiry_text(notice: NotifyInput) -> str:
    if notice.expires_at is None:
        return "never expires"
    return f"expires {notice.expires_at.strftime('%Y-%m-%d %H:%M UTC')}"


def summary(notice: NotifyInput, approvers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The flat facts every payload carries (plus, for a request with named
    approvers, each approver's personal link: `approvers`, and `quorum`)."""
    info = notice.info
    extra: dict[str, Any] = {}
    if approvers:
        extra = {"approvers": approvers, "quorum": info.quorum}
    if notice.kind != "request":  # a reminder or an escalation of a waiting call
        extra["notice"] = notice.kind
    return {
        "request_id": info.request_id,
        "session_id": notice.session.session_id,
        "turn_id": notice.session.turn_id,
        "tool_use_id": info.tool_use_id,
        "tool_name": info.tool_name,
        "side_effects": info.side_effects.value,
        "rule": info.rule,
        "input_summary": info.input_summary,
        "projected_impact": list(info.projected_impact),
        "approval_url": notice.approval_url,
        "requested_at": notice.requested_at.isoformat(),
        "expires_at": notice.expires_at.isoformat() if notice.expires_at else None,
        **extra,
    }


def slack_payload(
    notice: NotifyInput, approvers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Slack incoming-webhook shape: `text` fallback plus Block Kit sections."""
    info = notice.info
    impact = "\n".join(f"• {line}" for line in info.projected_impact) or "—"
    headline = f"parkgate: `{info.tool_name}` ({info.side_effects.value}) is waiting for approval"
    return {
        "text": f"{headline}: {notice.approval_url}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{headline}*"}},
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*Session*\n{notice.session.session_id}"},
                    {"type": "mrkdwn", "text": f"*Rule*\n{info.rule or '—'}"},
                    {"type": "mrkdwn", "text": f"*Impact*\n{impact}"},
                    {"type": "mrkdwn", "text": f"*Expiry*\n{_expiry_text(notice)}"},
                ],
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": f"```{info.input_summary[:2500]}```"},
            },
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": f"Review as {a['name']}"},
                        "url": a["approval_url"],
                    }
                    for a in approvers
                ][:25]
                if approvers
                else [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Review"},
                        "url": notice.approval_url,
                    }
                ],
            },
        ],
    }


def generic_payload(
    notice: NotifyInput, approvers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Plain JSON: the event type plus the flat facts."""
    return {"event": "tool.confirmation_requested", **summary(notice, approvers)}


def payload_for(
    kind: str, notice: NotifyInput, approvers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    if kind == "slack":
        return slack_payload(notice, approvers)
    return generic_payload(notice, approvers)


async def deliver(
    client: httpx.AsyncClient, webhook: Webhook, notice: NotifyInput, timeout: float = 10.0,
    approvers: list[dict[str, Any]] | None = None,
) -> None:
    """POST one notice; raise WebhookError unless the target answers 2xx."""
    import httpx

    try:
        response = await client.post(
            webhook.url,
            json=payload_for(webhook.kind, notice, approvers),
            headers=webhook.headers,
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise WebhookError(f"webhook unreachable: {type(exc).__name__}") from exc
    if not 200 <= response.status_code < 300:
        raise WebhookError(f"webhook answered HTTP {response.status_code}")
