"""Every refused decision is answered by its reason, through one mapping."""

from __future__ import annotations

from datetime import UTC, datetime

from parkgate.api.shared.decisions import REFUSALS, answer_refused, outcome
from parkgate.approvals.decisions import DecisionRecord, RejectReason, no_longer_waiting, reason_of
from parkgate.durable.payloads import DecideResult

WINNER = DecisionRecord(request_id="r1", decision="deny", decided_by="ann",
                        decided_at=datetime(2024, 1, 1, tzinfo=UTC))


def test_every_reason_has_an_answer() -> None:
    assert set(REFUSALS) == set(RejectReason)


def test_invalid_edits_are_422_whatever_the_wording() -> None:
    for reason in RejectReason:
        got = answer_refused(DecideResult(accepted=False, message="x", reason=reason))
        assert (got.status == 422) == reason.invalid_input, reason
        assert got.fix_input == reason.invalid_input
        assert got.message == "x"


def test_a_winner_is_answered_as_already_decided() -> None:
    got = answer_refused(DecideResult(accepted=False, winner=WINNER,
                                      reason=RejectReason.UNKNOWN_REQUEST))
    assert (got.status, got.code, got.message) == (409, "already_decided",
                                                    "already decided: deny")


def test_no_reason_is_not_waiting_and_not_a_named_approver_is_forbidden() -> None:
    assert answer_refused(DecideResult(accepted=False)).code == "not_waiting"
    named = answer_refused(DecideResult(accepted=False, message="m",
                                        reason=RejectReason.NOT_A_NAMED_APPROVER))
    assert (named.status, named.code) == (403, "forbidden")


def test_outcomes_and_status_reasons() -> None:
    assert outcome(DecideResult(accepted=True)) == "counted"
    assert outcome(DecideResult(accepted=True, winner=WINNER)) == "won"
    assert outcome(DecideResult(accepted=False)) == "lost"
    assert no_longer_waiting("expired").reason == RejectReason.EXPIRED
    assert no_longer_waiting("cancelled").reason == RejectReason.CANCELLED
    assert no_longer_waiting("succeeded").reason == RejectReason.NOT_WAITING
    assert reason_of("edits_invalid") == RejectReason.EDITS_INVALID
    assert reason_of("from_the_future") is None and reason_of(None) is None


def test_an_unproven_decision_is_a_server_side_503() -> None:
    """The worker refused this API's own proof: API and workers do not share the
    payload keys (issue 28). Not the decider's fault, and never a 500."""
    got = answer_refused(DecideResult(accepted=False, message="decision refused: ...",
                                      reason=RejectReason.UNPROVEN))
    assert (got.status, got.code) == (503, "unproven")
