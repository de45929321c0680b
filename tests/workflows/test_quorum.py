"""Named approvers and quorum in ToolCallWorkflow (time-skipping server, real store).

A rule `approvers: [group:oncall], quorum: 2` parks a write until two distinct
named approvers allow it; any deny denies; the same approver twice counts
once; expiry is unchanged (an allow short of the quorum does not run it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import DecideResult
from parkgate.models import ToolErrorClass, ToolUseBlock
from tests.fixtures.temporal import DurableRig, durable_rig

POLICY = {"rules": [{"tool": "write_file", "mode": "prompt",
                     "approvers": ["group:oncall"], "quorum": 2}]}
PEOPLE: dict[str, Any] = {
    "approvers": {"alice": {"email": "alice@example.com"}, "bob": {}, "carol": {}},
    "approver_groups": {"oncall": ["alice", "bob", "carol"]},
}


@asynccontextmanager
async def quorum_rig(env: WorkflowEnvironment, repo: Any, tmp_path: Path,
                     **settings: Any) -> AsyncIterator[DurableRig]:
    async with durable_rig(env.client, repo, tmp_path, policy=POLICY, **PEOPLE,
                           **settings) as rig:
        yield rig


async def vote(rig: DurableRig, request_id: str, who: str, decision: str = "allow",
               **kw: Any) -> DecideResult:
    return await rig.dispatcher.decide(
        request_id, decision, decided_by=who, via="link", principal_id=f"approver:{who}",
        approver=who, **kw,
    )


async def test_two_distinct_allows_run_the_call(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with quorum_rig(temporal_env, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_q", name="write_file", input={"path": "q.txt", "content": "q"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_q")
        view = await rig.dispatcher.status(session.session_id, "tu_q")
        assert view.request is not None
        assert (view.request.approvers, view.request.quorum) == (["alice", "bob", "carol"], 2)

        first = await vote(rig, rid, "alice")
        assert first.accepted and first.winner is None
        assert (first.votes, first.quorum) == (["alice"], 2)
        assert (await rig.dispatcher.status(session.session_id, "tu_q")).status == "parked"
        assert (await rig.dispatcher.status(session.session_id, "tu_q")).votes == ["alice"]
        assert not (rig.workspace / "q.txt").exists()

        second = await vote(rig, rid, "bob")
        assert second.accepted and second.winner is not None
        assert second.winner.votes == ["alice", "bob"]
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "q.txt").read_text() == "q"

        stored = await sqlite_repo.get_approval(rid)
        assert stored.decision == "allow" and stored.votes == ["alice", "bob"]
        assert stored.principal_id == "approver:bob"
        resolved = [e.event for e in await sqlite_repo.timeline(session.session_id, "tu_q")
                    if e.event.type == "tool.confirmation_resolved"]
        assert resolved[0].data["votes"] == ["alice", "bob"]


async def test_a_deny_after_one_allow_denies(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with quorum_rig(temporal_env, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_d", name="write_file", input={"path": "d.txt", "content": "d"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_d")
        assert (await vote(rig, rid, "alice")).winner is None
        denied = await vote(rig, rid, "carol", "deny", reason="not during the freeze")
        assert denied.accepted and denied.winner is not None
        assert denied.winner.decision == "deny" and denied.winner.votes == ["alice"]
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.USER_DENIED
        assert "not during the freeze" in outcome.result.text
        assert not (rig.workspace / "d.txt").exists()
        row = await sqlite_repo.get_call(session.session_id, "tu_d")
        assert row.status == CallStatus.DENIED and row.principal_id == "approver:carol"


async def test_expiry_with_one_allow_is_confirmation_timeout(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with quorum_rig(temporal_env, sqlite_repo, tmp_path,
                          approval_expiry_by_class={"WRITE": 3600}) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_e", name="write_file", input={"path": "e.txt", "content": "e"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_e")
        assert (await vote(rig, rid, "bob")).winner is None
        outcome = await handle.result()  # time skips to the expiry
        assert outcome.error_class == ToolErrorClass.CONFIRMATION_TIMEOUT
        assert outcome.status == CallStatus.EXPIRED
        assert not (rig.workspace / "e.txt").exists()
        stored = await sqlite_repo.get_approval(rid)
        assert stored.decision == "expired" and stored.votes == ["bob"]


async def test_the_same_approver_twice_is_counted_once(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with quorum_rig(temporal_env, sqlite_repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(id="tu_t", name="write_file", input={"path": "t.txt", "content": "t"})
        handle = await rig.dispatcher.start(call, session)
        rid = await rig.wait_parked(session.session_id, "tu_t")
        assert (await vote(rig, rid, "alice")).winner is None
        again = await vote(rig, rid, "alice")
        assert not again.accepted
        assert "alice has already approved (1 of 2 approvals)" in again.message
        # As a signal (no validator) it is ignored the same way.
        await vote(rig, rid, "alice", wait=False)
        view = await rig.dispatcher.status(session.session_id, "tu_t")
        assert view.status == "parked" and view.votes == ["alice"]
        # Someone who is not a named approver does not count either.
        stranger = await rig.dispatcher.decide(rid, "allow", decided_by="mallory", via="api")
        assert not stranger.accepted and "named approvers" in stranger.message
        assert (await vote(rig, rid, "carol")).winner is not None
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED
        assert outcome.decision is not None and outcome.decision.votes == ["alice", "carol"]
