"""Webhook payloads for a parked call (pure builders)."""

from __future__ import annotations

from datetime import UTC, datetime

from parkgate.channels.webhook import generic_payload, payload_for, slack_payload
from parkgate.durable.payloads import NotifyInput
from parkgate.models import Session, SideEffects
from parkgate.verdicts import ApprovalInfo


def notice(expires: bool = True) -> NotifyInput:
    return NotifyInput(
        info=ApprovalInfo(
            request_id="req-1", tool_name="write_file", tool_use_id="toolu_1",
            input_summary='{"path": "a.txt"}', side_effects=SideEffects.WRITE,
            rule="default.write=prompt", input_hash="h", projected_impact=["will create a.txt"],
        ),
        session=Session(session_id="s1", turn_id="t1", workspace_path="ws"),
        approval_url="https://pg.example/approve/TOKEN",
        requested_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
        expires_at=datetime(2026, 1, 3, 3, 4, tzinfo=UTC) if expires else None,
    )


def test_generic_payload_is_flat_json() -> None:
    body = generic_payload(notice())
    assert body["event"] == "tool.confirmation_requested"
    assert body["approval_url"] == "https://pg.example/approve/TOKEN"
    assert body["tool_name"] == "write_file" and body["side_effects"] == "write"
    assert body["projected_impact"] == ["will create a.txt"]
    assert body["expires_at"] == "2026-01-03T03:04:00+00:00"
    assert generic_payload(notice(expires=False))["expires_at"] is None


def test_slack_payload_has_text_fallback_and_a_button() -> None:
    body = slack_payload(notice())
    assert "write_file" in body["text"] and body["text"].endswith("/approve/TOKEN")
    button = body["blocks"][-1]["elements"][0]
    assert button["url"] == "https://pg.example/approve/TOKEN"
    fields = " ".join(f["text"] for f in body["blocks"][1]["fields"])
    assert "will create a.txt" in fields and "2026-01-03 03:04 UTC" in fields
    assert "never expires" in " ".join(
        f["text"] for f in slack_payload(notice(expires=False))["blocks"][1]["fields"])
    assert payload_for("slack", notice()) == body
    assert payload_for("generic", notice())["event"] == "tool.confirmation_requested"
