"""parkgate.workspaces.ground: which project may register a session on a workspace path."""

from __future__ import annotations

import pytest

from parkgate.workspaces.ground import Holding, judge, lineage, overlaps

A_OWNS = Holding(path="/w/a", project="alpha", kind="owner")


def test_overlap_is_lexical_on_whole_components() -> None:
    assert overlaps("/w/a", "/w/a") and overlaps("/w/a/b", "/w/a") and overlaps("/w", "/w/a")
    assert not overlaps("/w/ab", "/w/a") and not overlaps("/w/b", "/w/a")
    assert lineage("/w/a/b") == ["/w/a/b", "/w/a", "/w", "/"]


@pytest.mark.parametrize("path", ["/w/a", "/w/a/sub", "/w", "/"])
def test_another_projects_workspace_inside_or_around_is_refused(path: str) -> None:
    verdict = judge(path, "beta", [A_OWNS])
    assert not verdict.allowed and not verdict.claim
    assert verdict.reason is not None and "alpha" not in verdict.reason


def test_first_registration_claims_and_the_owner_keeps_its_ground() -> None:
    assert judge("/w/b", "beta", [A_OWNS]).claim  # no overlap: beta's now
    inside = judge("/w/a/sub", "alpha", [A_OWNS])
    assert inside.allowed and not inside.claim  # already alpha's
    assert judge("/w", "alpha", [A_OWNS]).claim  # around its own: alpha's too


def test_grants() -> None:
    grant = Holding(path="/w/a/shared", project="beta", kind="grant")
    held = [A_OWNS, grant]
    assert judge("/w/a/shared/x", "beta", held).allowed  # inside the grant
    assert not judge("/w/a", "beta", held).allowed  # the grant is only the part
    assert judge("/w/a/shared", "alpha", held).allowed  # the grantor keeps its ground
    assert not judge("/w/a/shared", "gamma", held).allowed
    # A path reserved for a project (a grant nobody owns) is closed to the others.
    reserved = [Holding(path="/srv/pay", project="payments", kind="grant")]
    assert not judge("/srv/pay/x", "other", reserved).allowed
    assert not judge("/srv", "other", reserved).allowed
    assert judge("/srv/pay/x", "payments", reserved).allowed


def test_an_owned_path_inside_ones_own_ground_still_blocks() -> None:
    """Overlaps carried over from before ground existed: the stricter reading wins."""
    held = [A_OWNS, Holding(path="/w/a/b", project="beta", kind="owner")]
    assert not judge("/w/a/b", "alpha", held).allowed
    assert judge("/w/a/c", "alpha", held).allowed
