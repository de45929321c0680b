"""Workspace holdings in the store (SQLite and PostgreSQL): claims are judged and
recorded in one serialized transaction, grants and releases by exact path."""

from __future__ import annotations

import asyncio

from parkgate.store.repository import Repository


async def test_claims_grants_and_releases(repo: Repository) -> None:
    assert (await repo.claim_workspace("/w/a", "alpha", by="k1")).claim
    assert not (await repo.claim_workspace("/w/a/b", "beta", by="k2")).allowed
    assert not (await repo.claim_workspace("/w", "beta", by="k2")).allowed
    assert (await repo.claim_workspace("/w/a_b", "beta", by="k2")).claim  # not inside /w/a
    assert await repo.grant_workspace("/w/a/b", "beta", by="cli")
    assert not await repo.grant_workspace("/w/a/b", "beta", by="cli")  # once
    verdict = await repo.claim_workspace("/w/a/b/c", "beta", by="k2")
    assert verdict.allowed and not verdict.claim
    held = [(h.path, h.project, h.kind) for h in await repo.workspace_holdings(path="/w/a")]
    assert held == [("/w/a", "alpha", "owner"), ("/w/a/b", "beta", "grant")]
    assert not await repo.release_workspace("/w/a/b", "beta", kinds=("owner",))
    assert await repo.release_workspace("/w/a/b", "beta")
    assert not (await repo.claim_workspace("/w/a/b/c", "beta", by="k2")).allowed


async def test_paths_with_like_wildcards_are_matched_literally(repo: Repository) -> None:
    assert (await repo.claim_workspace("/w/100%_x", "alpha", by="k1")).claim
    assert (await repo.claim_workspace("/w/100abx", "beta", by="k2")).claim
    assert not (await repo.claim_workspace("/w/100%_x/in", "beta", by="k2")).allowed
    inside = await repo.workspace_holdings(path="/w/100%_x")
    assert [h.project for h in inside] == ["alpha"]


async def test_racing_claims_of_overlapping_paths_have_one_winner(repo: Repository) -> None:
    paths = ["/r", "/r/x", "/r/x/y", "/r/x", "/r", "/r/x/y/z"] * 2
    verdicts = await asyncio.gather(*(
        repo.claim_workspace(path, f"p{i}", by=f"k{i}") for i, path in enumerate(paths)))
    assert sum(v.allowed for v in verdicts) == 1
    assert len(await repo.workspace_holdings()) == 1
