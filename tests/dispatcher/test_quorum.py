"""The quorum tally the call workflow uses."""

from __future__ import annotations

from parkgate.approvals.decisions import Rejection, RejectReason
from parkgate.approvals.quorum import count, decides, vote_problem

NAMED = ["alice", "bob", "carol"]


def test_without_named_approvers_the_first_decision_decides() -> None:
    assert vote_problem([], 1, [], None, "allow") is None
    assert decides([], 1, [], "allow")


def test_two_distinct_allows_meet_a_quorum_of_two() -> None:
    votes = count([], "alice", "allow")
    assert not decides(NAMED, 2, votes, "allow")
    votes = count(votes, "bob", "allow")
    assert votes == ["alice", "bob"]
    assert decides(NAMED, 2, votes, "allow")


def test_the_same_approver_twice_counts_once() -> None:
    votes = count([], "alice", "allow")
    assert vote_problem(NAMED, 2, votes, "alice", "allow") == Rejection(
        RejectReason.QUORUM_DUPLICATE, "alice has already approved (1 of 2 approvals)"
    )
    assert count(votes, "alice", "allow") == ["alice"]
    assert not decides(NAMED, 2, count(votes, "alice", "allow"), "allow")


def test_any_deny_decides_and_adds_no_vote() -> None:
    votes = count([], "alice", "allow")
    assert vote_problem(NAMED, 2, votes, "bob", "deny") is None
    assert count(votes, "bob", "deny") == ["alice"]
    assert decides(NAMED, 2, votes, "deny")


def test_only_named_approvers_vote_and_edits_need_a_single_approver() -> None:
    problem = vote_problem(NAMED, 2, [], "mallory", "allow")
    assert problem is not None and problem.reason == RejectReason.NOT_A_NAMED_APPROVER
    assert "named approvers: alice, bob, carol" in problem.message
    unnamed = vote_problem(NAMED, 2, [], None, "allow")
    assert unnamed is not None and unnamed.reason == RejectReason.NOT_A_NAMED_APPROVER
    edits = vote_problem(NAMED, 2, [], "alice", "allow_with_edits")
    assert edits is not None and edits.reason == RejectReason.EDITS_UNAVAILABLE
    assert vote_problem(NAMED, 1, [], "alice", "allow_with_edits") is None
