"""Slack's interactivity endpoint: Approve/Deny clicks on a parked call's message.

Every request must carry Slack's signature (HMAC of the raw body with the
signing secret) and a timestamp inside Slack's 5-minute window; anything else
is a 401 with the reason. The clicking Slack user is mapped to a named
approver (`approvers.<name>.slack_user_id`) and the decision goes through the
same `decide` update as approval links and the confirmations API (principal
`approver:<name>`, via "slack"): quorum and named-approver rules apply. A user
who is not an approver of the call, or whose approver does not approve for the
call's project (`approvers.<name>.projects`), gets an ephemeral reply; nothing
is decided.
The message is then updated with the tally or the outcome, also when the call
was decided elsewhere or expired.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.background import BackgroundTask

from parkgate.api.shared import metrics
from parkgate.api.shared.approval_links import (
    named_approvers,
    not_your_project,
    project_of,
    self_approval_of,
    submitter_of,
)
from parkgate.api.shared.decisions import answer_refused, outcome
from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.service import CallService
from parkgate.approvals import identity
from parkgate.approvals.decisions import DecideInput, DecisionRecord
from parkgate.calls.records import ApprovalRecord
from parkgate.channels import slack, slack_web
from parkgate.durable.payloads import SlackMessageRef
from parkgate.models import utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.verdicts import ApprovalInfo

router = APIRouter(include_in_schema=False)
log = logging.getLogger(__name__)


class _Click:
    """One block_actions payload, reduced to what parkgate uses."""

    def __init__(self, payload: dict[str, Any]) -> None:
        actions = payload.get("actions")
        if payload.get("type") != "block_actions" or not isinstance(actions, list) or not actions:
            raise ApiError(400, "bad_request", "only block_actions interactions are handled")
        action = _obj(actions[0])
        decision = slack.ACTIONS.get(str(action.get("action_id")))
        request_id = action.get("value")
        user_id = _obj(payload.get("user")).get("id")
        if decision is None or not isinstance(request_id, str) or not isinstance(user_id, str):
            raise ApiError(400, "bad_request", "not a parkgate Approve/Deny action")
        self.decision = decision
        self.request_id = request_id
        self.user_id = user_id
        container = _obj(payload.get("container"))
        channel = container.get("channel_id") or _obj(payload.get("channel")).get("id")
        ts = container.get("message_ts") or _obj(payload.get("message")).get("ts")
        self.message = (SlackMessageRef(channel=channel, ts=ts)
                        if isinstance(channel, str) and isinstance(ts, str) else None)
        url = payload.get("response_url")
        self.response_url = url if isinstance(url, str) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _payload(body: bytes) -> dict[str, Any]:
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, IndexError, RecursionError):
        raise ApiError(400, "bad_request",
                       "expected a form field `payload` holding Slack's JSON") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "bad_request", "the payload must be a JSON object")
    return payload


@router.post("/slack/interactivity")
async def slack_interactivity(request: Request) -> JSONResponse:
    settings: Settings = request.app.state.settings
    secret = settings.slack_signing_secret
    if not secret:
        raise ApiError(404, "not_found", "Slack is not configured (slack_signing_secret)")
    body = await request.body()
    problem = slack.check_signature(
        secret, body, request.headers.get("X-Slack-Request-Timestamp"),
        request.headers.get("X-Slack-Signature"),
    )
    if problem is not None:
        raise ApiError(401, "unauthorized", problem)
    click = _Click(_payload(body))
    later: list[Any] = []
    ok, text = await _apply(request, settings, click, later)
    if not ok and click.response_url:
        later.append(partial(slack_web.tell_clicker, click.response_url, text))
    # Slack wants the answer within 3 seconds: its own Web API calls run after it.
    return JSONResponse({"ok": ok, "text": text}, background=BackgroundTask(_run, later))


async def _apply(
    request: Request, settings: Settings, click: _Click, later: list[Any]
) -> tuple[bool, str]:
    """Decide (or refuse) the click; (accepted, what to tell the user)."""
    repo: Repository = request.app.state.deps.repo
    approval = await repo.get_approval(click.request_id)
    if approval is None:
        return False, "parkgate does not know this request; nothing was decided."
    info = ApprovalInfo.model_validate(approval.info)
    named = named_approvers(approval)
    approver = settings.approver_for_slack_user(click.user_id)
    if approver is None:
        return False, ("Your Slack account is not mapped to a parkgate approver "
                       "(approvers.<name>.slack_user_id); nothing was decided.")
    if not settings.approver_decides_in(approver, await project_of(repo, approval)):
        return False, not_your_project(approver)
    if named and approver not in named:
        return False, (f"This call is decided by its named approvers ({', '.join(named)}); "
                       f"you act as {approver}. Nothing was decided.")
    if approval.decision is not None or _past(approval.expires_at):
        text = await _show_stored(request, settings, click, approval, info, later)
        return False, f"This call is no longer waiting: {text}"
    # Separation of duties: an approver whose own API key submitted the call
    # does not decide it from Slack either, unless the rule allows self-approval.
    submitter = await submitter_of(repo, approval)
    own_key = settings.approvers[approver].key
    is_self = submitter is not None and own_key is not None and own_key == submitter.key_name
    if is_self and not self_approval_of(approval):
        return False, (f"{approver}'s API key ({own_key}) submitted this call; the rule does "
                       "not allow self-approval (separation of duties). Nothing was decided.")
    service: CallService = request.app.state.calls
    result = await service.decide(approval.session_id, approval.tool_use_id, DecideInput(
        request_id=approval.request_id, decision=click.decision, decided_by=approver,
        via="slack", principal_id=f"approver:{approver}", approver=approver,
        self_approved=is_self, identity=identity.slack(click.user_id, approver),
    ))
    metrics.count_decision(click.decision, outcome(result))
    if result.accepted and result.winner is not None:
        metrics.observe_approval_latency(
            click.decision, "slack",
            (result.winner.decided_at - approval.requested_at).total_seconds())
    if result.accepted and result.winner is None:
        if click.message:
            later.append(partial(slack_web.update_waiting, settings, click.message, info,
                                 approval.session_id, approval.expires_at,
                                 list(result.votes)))
        return True, (f"Your approval is counted ({len(result.votes)} of {result.quorum}); "
                      "the call runs when enough approvers have approved.")
    if result.winner is not None:
        status = ("denied" if result.winner.decision == "deny" else "running")
        text = slack.outcome_text(status, result.winner)
        if click.message:
            later.append(partial(_refresh_outcome, repo, settings, click.message, info,
                                 approval, result.winner, status))
        if result.accepted:
            return True, text
        return False, f"Already decided: {text}"
    stored = await repo.get_approval(approval.request_id) or approval
    if stored.decision is not None or _past(stored.expires_at):
        text = await _show_stored(request, settings, click, stored, info, later)
        return False, f"This call is no longer waiting: {text}"
    return False, answer_refused(result).message


def _past(expires_at: datetime | None) -> bool:
    if expires_at is None:
        return False
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    return utcnow() >= expires_at


async def _show_stored(
    request: Request, settings: Settings, click: _Click, approval: ApprovalRecord,
    info: ApprovalInfo, later: list[Any],
) -> str:
    """Update the message with what the store knows and return that text."""
    repo: Repository = request.app.state.deps.repo
    call = await repo.get_call(approval.session_id, approval.tool_use_id)
    status = call.status.value if call is not None else "expired"
    decision = approval.decision_record()
    if decision is None and status in ("parked", "queued", "running"):
        status = "expired"  # past its expiry; the workflow records it at its timer
    text = slack.outcome_text(status, decision)
    if click.message:
        later.append(partial(slack_web.update_outcome, settings, click.message, info,
                             approval.session_id, text))
    return text


async def _refresh_outcome(
    repo: Repository, settings: Settings, message: SlackMessageRef, info: ApprovalInfo,
    approval: ApprovalRecord, decision: DecisionRecord, status: str,
) -> None:
    """Show a decision's outcome, with the call's final status if it has one by
    now (a fast call may have ended, and shown that, before this runs)."""
    call = await repo.get_call(approval.session_id, approval.tool_use_id)
    if call is not None and call.status.terminal:
        status = call.status.value
    await slack_web.update_outcome(settings, message, info, approval.session_id,
                                   slack.outcome_text(status, decision))


async def _run(calls: list[Any]) -> None:
    """Slack calls made after answering; Slack being down is logged, never raised."""
    for call in calls:
        try:
            await call()
        except slack_web.SlackError as exc:
            log.warning("slack: %s", exc)
