"""Slack approvals: the Block Kit message of a parked call and Slack's request signature.

Pure: the message builders and the signature check do no I/O. Posting and
updating the message is done by activities/slack.py and the interactivity
endpoint (dispatcher/api/people/routes_slack.py), both through slack-sdk's
AsyncWebClient. A button carries only the request id; who clicked is Slack's
signed `user.id`, mapped to a named approver by the `slack_user_id` setting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from parkgate.approvals.decisions import DecisionRecord
from parkgate.verdicts import ApprovalInfo

if TYPE_CHECKING:
    from slack_sdk.signature import Clock

ACTION_APPROVE = "parkgate_approve"
ACTION_DENY = "parkgate_deny"
ACTIONS = {ACTION_APPROVE: "allow", ACTION_DENY: "deny"}
#: Slack's documented replay window for a request timestamp.
MAX_AGE_SECONDS = 60 * 5
#: A section's text may hold 3,000 characters; leave room for the fences.
_MAX_CODE = 2_800


def check_signature(
    signing_secret: str, body: bytes, timestamp: str | None, signature: str | None,
    now: float | None = None,
) -> str | None:
    """Why a request is not Slack's (None when its signature is valid and fresh)."""
    if not timestamp or not signature:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
    try:
        sent = int(timestamp)
    except ValueError:
        return "X-Slack-Request-Timestamp is not a number"
    current = time.time() if now is None else now
    if abs(current - sent) > MAX_AGE_SECONDS:
        return "the request timestamp is outside the 5-minute window (replayed or clock skew)"
    # slack-sdk on first use only: an API without Slack never loads it (memory).
    from slack_sdk.signature import SignatureVerifier

    verifier = SignatureVerifier(signing_secret, clock=_clock_class()(current))
    if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
        return "the Slack signature does not match"
    return None


@cache
def _clock_class() -> Callable[[float], Clock]:
    """slack-sdk's clock interface, pinned to the time the window was checked at
    (defined on first use: slack-sdk is imported only when Slack is used)."""
    from slack_sdk.signature import Clock

    class _Clock(Clock):
        def __init__(self, now: float) -> None:
            self._now = now

        def now(self) -> float:
            return self._now

    return _Clock


def _code(info: ApprovalInfo) -> str:
    text = info.diff or info.input_summary
    if len(text) > _MAX_CODE:
        text = text[:_MAX_CODE] + "\n[... cut; the approval page shows it whole]"
    return f"```{text}```"


def _headline(info: ApprovalInfo) -> str:
    return f"`{info.tool_name}` ({info.side_effects.value})"


def _facts(info: ApprovalInfo, session_id: str, expires_at: datetime | None) -> dict[str, Any]:
    impact = "\n".join(f"• {line}" for line in info.projected_impact) or "—"
    expiry = expires_at.strftime("%Y-%m-%d %H:%M UTC") if expires_at else "never"
    fields = [
        {"type": "mrkdwn", "text": f"*Session*\n{session_id}"},
        {"type": "mrkdwn", "text": f"*Rule*\n{info.rule or '—'}"},
        {"type": "mrkdwn", "text": f"*Impact*\n{impact}"},
        {"type": "mrkdwn", "text": f"*Expires*\n{expiry}"},
    ]
    return {"type": "section", "fields": fields}


def waiting_text(info: ApprovalInfo, session_id: str) -> str:
    """The notification fallback text."""
    return f"parkgate: {info.tool_name} in session {session_id} is waiting for approval"


def waiting_blocks(
    info: ApprovalInfo, session_id: str, expires_at: datetime | None,
    votes: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The parked call with Approve and Deny buttons (value: the request id)."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": f"*{_headline(info)} is waiting for approval*"}},
        _facts(info, session_id, expires_at),
        {"type": "section", "text": {"type": "mrkdwn", "text": _code(info)}},
    ]
    if info.client_executed:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": CLIENT_RUNS}]})
    if info.approvers:
        tally = f"{len(votes or [])} of {info.quorum} approvals"
        if votes:
            tally += ": " + ", ".join(votes)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": (
            f"Decided by its named approvers: {', '.join(info.approvers)} ({tally})")}]})
    blocks.append({
        "type": "actions",
        "block_id": f"parkgate:{info.request_id}",
        "elements": [
            {"type": "button", "action_id": ACTION_APPROVE, "style": "primary",
             "text": {"type": "plain_text", "text": "Approve"}, "value": info.request_id},
            {"type": "button", "action_id": ACTION_DENY, "style": "danger",
             "text": {"type": "plain_text", "text": "Deny"}, "value": info.request_id},
        ],
    })
    return blocks


_VERBS = {"allow": "Approved", "allow_with_edits": "Approved with edits", "deny": "Denied"}
_ENDS = {
    "succeeded": "the call ran and succeeded.",
    "failed": "the call ran and failed.",
    "running": "the call is running.",
    "denied": "the call did not run.",
    "expired": "the call did not run.",
    "cancelled": "the call was cancelled.",
    "outcome_unknown": "the agent's client claimed the call and reported no outcome "
                       "before its lease ended; outcome unknown.",
    "unclaimed": "no client claimed the released call in time; it did not run.",
}
#: Said of a client tool's call wherever a human decides it.
CLIENT_RUNS = ("The agent's client runs this tool itself: approving releases exactly "
               "these arguments to it, once; parkgate records what it reports.")


def outcome_text(status: str, decision: DecisionRecord | None) -> str:
    """One line for the ended call: who decided what, through which channel, and how it ended."""
    if decision is None:
        if status == "expired":
            return "Expired: no decision arrived before the request expired; the call did not run."
        if status == "cancelled":
            return "Cancelled before anyone decided; the call did not run."
        return f"Ended ({status}) without a decision."
    who = decision.decided_by or (
        f"{decision.claimed_name} (name given on a link)" if decision.claimed_name else "someone")
    via = f" via {decision.via}" if decision.via else ""
    text = f"{_VERBS.get(decision.decision, decision.decision)} by {who}{via}; "
    text += _ENDS.get(status, f"the call ended ({status}).")
    if decision.reason:
        text += f" Reason: {decision.reason}"
    return text


def outcome_blocks(info: ApprovalInfo, session_id: str, text: str) -> list[dict[str, Any]]:
    """The message once decided or over: the same facts, no buttons, the outcome."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{_headline(info)}*"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*Session* {session_id}"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _code(info)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": text}]},
    ]
