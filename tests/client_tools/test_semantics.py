"""`audit verify` meaning checks of client-executed calls (pure: stored rows in, problems out)."""

from __future__ import annotations

from typing import Any

from parkgate.store.semantics import check_call


def problems(types: list[str], status: str) -> list[str]:
    events: list[dict[str, Any]] = [{"type": t, "data": {}} for t in types]
    return [p.detail for p in check_call("s", "t", events, {"status": status}, {})]


def test_true_client_stories_pass() -> None:
    assert problems(["tool.released", "tool.claimed", "tool.outcome_reported",
                     "tool.completed"], "succeeded") == []
    assert problems(["tool.released", "tool.claimed", "tool.lease_expired",
                     "tool.outcome_late"], "outcome_unknown") == []
    assert problems(["tool.released", "tool.claimed", "tool.failed"], "cancelled") == []


def test_each_impossible_client_story_is_named() -> None:
    assert problems(["tool.released", "tool.released"], "released") == [
        "tool.released recorded 2 times"]
    assert "claimed or reported without a release" in problems(["tool.claimed"], "claimed")
    both = problems(["tool.released", "tool.claimed", "tool.outcome_reported",
                     "tool.lease_expired"], "succeeded")
    assert any("both an outcome and a lease end" in p for p in both)
    assert any("no tool.lease_expired" in p
               for p in problems(["tool.released", "tool.claimed"], "outcome_unknown"))
    assert any("reported no outcome" in p
               for p in problems(["tool.released", "tool.claimed", "tool.completed"],
                                 "succeeded"))
    assert any("late outcome without a lease end" in p
               for p in problems(["tool.released", "tool.claimed", "tool.outcome_late"],
                                 "claimed"))


def test_a_release_after_a_denial_is_named() -> None:
    events = [{"type": "tool.confirmation_resolved", "request_id": "r",
               "data": {"decision": "deny", "decided_by": "bob"}},
              {"type": "tool.released", "data": {}}]
    approvals = {"r": {"decision": "deny", "decided_by": "bob"}}
    found = [p.detail for p in check_call("s", "t", events, {"status": "released"}, approvals)]
    assert "tool.released after the request was resolved as deny" in found
