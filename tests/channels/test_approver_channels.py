"""Pure parts of the e-mail and Slack channels: signature window, outcome lines,
mail text, and the config check that catches settings that would notify nobody."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime
from pathlib import Path

from parkgate.approvals.decisions import DecisionRecord
from parkgate.channels import mail, slack
from parkgate.cli.config import check_settings
from parkgate.durable.payloads import NotifyInput
from parkgate.models import Session, SideEffects
from parkgate.settings import Settings
from parkgate.verdicts import ApprovalInfo

SECRET = "signing-secret"


def sign(body: bytes, ts: int, secret: str = SECRET) -> str:
    mac = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    return "v0=" + mac.hexdigest()


def test_signature_window_and_mismatch() -> None:
    body, now = b"payload=%7B%7D", 1_700_000_000
    assert slack.check_signature(SECRET, body, str(now), sign(body, now), now=now) is None
    assert slack.check_signature(SECRET, body, str(now - 299), sign(body, now - 299),
                                 now=now) is None
    stale = slack.check_signature(SECRET, body, str(now - 301), sign(body, now - 301), now=now)
    assert stale is not None and "5-minute" in stale
    wrong = slack.check_signature(SECRET, body + b"x", str(now), sign(body, now), now=now)
    assert wrong == "the Slack signature does not match"
    assert "missing" in (slack.check_signature(SECRET, body, None, None, now=now) or "")


def info(**kw: object) -> ApprovalInfo:
    base: dict[str, object] = dict(
        request_id="r1", tool_name="write_file", tool_use_id="toolu_1", input_summary="{}",
        side_effects=SideEffects.WRITE, rule="rules[0]", input_hash="h",
        diff="--- a/x\n+++ b/x\n+new line", approvers=["alice", "bob"], quorum=2)
    base.update(kw)
    return ApprovalInfo.model_validate(base)


def test_outcome_lines() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    allow = DecisionRecord(request_id="r1", decision="allow", decided_by="bob", via="slack",
                           decided_at=at)
    assert slack.outcome_text("succeeded", allow) == (
        "Approved by bob via slack; the call ran and succeeded.")
    deny = allow.model_copy(update={"decision": "deny", "reason": "not today"})
    assert slack.outcome_text("denied", deny) == (
        "Denied by bob via slack; the call did not run. Reason: not today")
    assert slack.outcome_text("expired", None).startswith("Expired:")
    blocks = slack.waiting_blocks(info(), "s1", None, ["alice"])
    actions = blocks[-1]["elements"]
    assert [(a["action_id"], a["value"]) for a in actions] == [
        ("parkgate_approve", "r1"), ("parkgate_deny", "r1")]
    assert not any(b["type"] == "actions" for b in slack.outcome_blocks(info(), "s1", "x"))


def test_mail_names_tool_session_and_carries_the_diff() -> None:
    notice = NotifyInput(info=info(), session=Session(session_id="s1", turn_id="t1",
                                                      workspace_path="/w"),
                         requested_at=datetime(2026, 1, 1, tzinfo=UTC))
    msg = mail.build_message(notice, sender="pg@example.org", approver="alice",
                             address="alice@example.org", link="https://pg/approve/TOKEN")
    assert "write_file" in msg["Subject"] and "s1" in msg["Subject"]
    text = msg.get_content()
    assert "https://pg/approve/TOKEN" in text and "+new line" in text
    assert "2 approvals needed" in text


def test_config_check_flags_channels_that_notify_nobody(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, workspace_roots=[tmp_path], smtp_host="mail",
                        slack_bot_token="xoxb-1", approvers={"alice": {}})
    problems = "\n".join(check_settings(settings))
    assert "no approver has an `email`" in problems
    assert "slack_bot_token and slack_channel must be set together" in problems
    ok = Settings(data_dir=tmp_path, workspace_roots=[tmp_path], smtp_host="mail",
                  slack_bot_token="xoxb-1", slack_channel="C1", slack_signing_secret="s",
                  approvers={"alice": {"email": "a@example.org", "slack_user_id": "U1"}})
    assert check_settings(ok) == []
