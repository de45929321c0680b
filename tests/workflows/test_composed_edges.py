"""Composed tools on the durable path at their edges: a sub-call's approval
expires, is cancelled, or is decided as it expires (each caller told the
truth); an undeclared sub-tool is refused and existing tools are unchanged; a
store outage carries sub-call events back, recorded once; a parked run resumes
without running a step again; a tool that swallows the park runs nothing after
it; with no workflow waiting, a prompted sub-call is refused. The main paths
are in test_composed.py, whose tools and helpers these share.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from parkgate.activities.classify import ClassifyActivities
from parkgate.activities.deps import Deps
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.record import RecordActivities
from parkgate.calls.records import CallStatus, HistoryStore
from parkgate.context import ToolContext
from parkgate.durable.payloads import ClassifyInput, ExecuteInput, RecordInput
from parkgate.durable.subcall_approvals import sub_call_request_id
from parkgate.models import (
    Session,
    TextBlock,
    ToolErrorClass,
    ToolOutput,
    ToolUseBlock,
)
from parkgate.verdicts import Execute
from tests.fixtures.temporal import durable_rig, make_pipeline, make_settings
from tests.workflows.test_composed import (
    PARENT_AUTO,
    FlakyStore,
    Sneaky,
    TwoWrites,
    wait_request,
)


async def test_sub_call_approval_expires_as_confirmation_timeout(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client,
        sqlite_repo,
        tmp_path,
        policy=PARENT_AUTO,
        extra_tools=[TwoWrites],
        approval_expiry_by_class={"write": 1.0},
    ) as rig:
        session = rig.session()
        sid = session.session_id
        call = ToolUseBlock(id="tu_exp", name="two_writes", input={"text": "late"})
        outcome = await rig.dispatcher.dispatch_outcome(call, session)
        assert outcome.result.text.splitlines()[:2] == [
            "first.txt: confirmation_timeout",
            "second.txt: confirmation_timeout",
        ]
        assert not (rig.workspace / "first.txt").exists()
        approval = await sqlite_repo.get_approval(sub_call_request_id(sid, "tu_exp.1"))
        assert approval.decision == "expired" and approval.via == "expiry"
        late = await rig.dispatcher.decide(approval.request_id, "allow", decided_by="ann")
        assert not late.accepted
        failed = [
            e.event
            for e in await sqlite_repo.timeline(sid, "tu_exp")
            if e.event.type == "tool.failed" and e.event.parent_tool_use_id == "tu_exp"
        ]
        assert [e.error_class for e in failed][:2] == [ToolErrorClass.CONFIRMATION_TIMEOUT] * 2


async def test_cancel_while_a_sub_call_waits(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, policy=PARENT_AUTO, extra_tools=[TwoWrites]
    ) as rig:
        session = rig.session()
        sid = session.session_id
        call = ToolUseBlock(id="tu_can", name="two_writes", input={"text": "never"})
        handle = await rig.dispatcher.start(call, session)
        await wait_request(sqlite_repo, sid, "tu_can.1")
        await rig.dispatcher.cancel(sid, "tu_can")
        outcome = await asyncio.wait_for(handle.result(), timeout=30)
        assert outcome.error_class == ToolErrorClass.CANCELLED, outcome.result.text
        assert not (rig.workspace / "first.txt").exists()
        timeline = await sqlite_repo.timeline(sid, "tu_can")
        resolved = [
            e.event for e in timeline
            if e.event.type == "tool.confirmation_resolved" and e.event.tool_use_id == "tu_can.1"
        ]
        assert [e.data["decision"] for e in resolved] == ["cancelled"]
        refused = await rig.dispatcher.decide(
            sub_call_request_id(sid, "tu_can.1"), "allow", decided_by="ann"
        )
        assert not refused.accepted and "no longer waiting" in refused.message


async def test_approval_after_an_unrecorded_expiry_is_told_expired(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """Expiry and approval race: the first the workflow commits wins. The store
    is down when the request expires (the expiry cannot be written yet); an
    approval arriving then is told `expired`, and the sub-call never runs. (It
    used to be accepted in the store, acknowledged as applied, and never run.)"""
    from parkgate.approvals.decisions import RejectReason

    store = FlakyStore(sqlite_repo)
    async with durable_rig(
        temporal_env.client, store, tmp_path, policy=PARENT_AUTO, extra_tools=[TwoWrites],
        approval_expiry_by_class={"write": 2.0},
    ) as rig:
        session = rig.session()
        sid = session.session_id
        handle = await rig.dispatcher.start(
            ToolUseBlock(id="tu_race", name="two_writes", input={"text": "r"}), session)
        first = await wait_request(sqlite_repo, sid, "tu_race.1")
        store.down = True
        deadline = asyncio.get_running_loop().time() + 30
        while (await rig.dispatcher.status(sid, "tu_race.1")).status != CallStatus.EXPIRED:
            assert asyncio.get_running_loop().time() < deadline, "the request never expired"
            await asyncio.sleep(0.1)
        assert (await sqlite_repo.get_approval(first)).decision is None  # not written yet
        store.down = False
        late = await rig.dispatcher.decide(first, "allow", decided_by="ann")
        assert not late.accepted and late.reason == RejectReason.EXPIRED, late.message
        second = await wait_request(sqlite_repo, sid, "tu_race.2")
        await rig.dispatcher.decide(second, "deny", decided_by="ann")
        outcome = await handle.result()
        assert outcome.result.text.splitlines()[:2] == [
            "first.txt: confirmation_timeout", "second.txt: user_denied"]
        assert not (rig.workspace / "first.txt").exists()
        stored = await sqlite_repo.get_approval(first)
        assert stored.decision == "expired" and stored.via == "expiry"


async def test_approvals_racing_the_expiry_are_told_the_truth(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """Approvals sent around the expiry instant: each one is either accepted and
    its sub-call runs, or told `expired` and it does not; never accepted
    without running."""
    from parkgate.approvals.decisions import RejectReason

    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, policy=PARENT_AUTO, extra_tools=[TwoWrites],
        approval_expiry_by_class={"write": 1.0},
    ) as rig:
        written = rig.workspace / "first.txt"
        answers = []
        for i, delay in enumerate([0.2, 1.0, 1.7]):
            written.unlink(missing_ok=True)
            session = rig.session()
            handle = await rig.dispatcher.start(
                ToolUseBlock(id=f"tu_rr{i}", name="two_writes", input={"text": "r"}), session)
            request = await wait_request(sqlite_repo, session.session_id, f"tu_rr{i}.1")
            await asyncio.sleep(delay)
            answer = await rig.dispatcher.decide(request, "allow", decided_by="ann")
            first = (await handle.result()).result.text.splitlines()[0]
            if answer.accepted:
                assert first == "first.txt: ok" and written.read_text() == "r", i
            else:
                assert answer.reason == RejectReason.EXPIRED, answer.message
                assert first == "first.txt: confirmation_timeout" and not written.exists(), i
            answers.append(answer.accepted)
        assert answers[0] and not answers[-1]  # both sides of the race were met


# ---------------------------------------------------------------------------
# Refusals and existing tools
# ---------------------------------------------------------------------------


async def test_undeclared_sub_tool_is_refused_durably(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, extra_tools=[Sneaky]
    ) as rig:
        (rig.workspace / "notes.md").write_text("n\n")
        session = rig.session()
        outcome = await rig.dispatcher.dispatch_outcome(
            ToolUseBlock(id="tu_sn", name="sneaky", input={}), session
        )
        assert outcome.status == CallStatus.SUCCEEDED
        assert outcome.result.text == "read=ok shell=permission_denied"
        assert not (rig.workspace / "pwned").exists()
        timeline = await sqlite_repo.timeline(session.session_id, "tu_sn")
        refused = [e.event for e in timeline if e.event.tool_use_id == "tu_sn.2"]
        assert [e.type for e in refused] == ["tool.failed"]
        assert refused[0].error_class == ToolErrorClass.PERMISSION_DENIED
        assert refused[0].parent_tool_use_id == "tu_sn"
        assert refused[0].data["rule"] == "composition:undeclared"


async def test_existing_tools_unchanged_with_composed_tools_registered(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        names = {d.name for d in rig.dispatcher.get_definitions_for_session(rig.session())}
        assert {"atomic_edit", "atomic_edit_checked", "read_file", "write_file"} <= names
        session = rig.session()
        call = ToolUseBlock(id="tu_w", name="write_file", input={"path": "w.txt", "content": "w"})
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_w")
        approval = await sqlite_repo.get_approval(request_id)
        assert approval.info["sub_tools"] == [] and approval.info["parent_tool_use_id"] is None
        await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="ann")
        assert (await handle.result()).status == CallStatus.SUCCEEDED
        types = [e.event.type for e in await sqlite_repo.timeline(session.session_id, "tu_w")]
        assert types == [
            "tool.confirmation_requested",
            "tool.confirmation_resolved",
            "tool.called",
            "tool.completed",
        ]


# ---------------------------------------------------------------------------
# Store outage: sub-call events travel back and are recorded once
# ---------------------------------------------------------------------------


async def test_store_outage_carries_sub_call_events_back(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    from parkgate.store import Repository
    from tests.fixtures.db import fresh_sqlite_url

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "f.txt").write_text("a\n")
    settings = make_settings(
        tmp_path / "data", workspace, tool_confirmation={"default": {"WRITE": "auto"}}
    )
    broken = await Repository.connect(fresh_sqlite_url(tmp_path))  # not migrated: every write fails
    try:
        deps = Deps(settings=settings, pipeline=make_pipeline(settings),
                    store=cast(HistoryStore, broken))
        session = Session(session_id="s-out", turn_id="t", workspace_path=str(workspace))
        call = ToolUseBlock(
            id="tu_o", name="atomic_edit", input={"path": "f.txt", "old": "a", "new": "b"}
        )
        verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
        assert isinstance(verdict.verdict, Execute)
        prepared = verdict.verdict.prepared
        out = await ActivityEnvironment().run(
            ExecuteActivities(deps).execute,
            ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash),
        )
    finally:
        await broken.close()
    assert out.error_class is None, out.result.text
    assert (workspace / "f.txt").read_text() == "b\n"
    carried = [(e.tool_use_id, e.type) for e in out.pending_events]
    assert carried == [
        ("tu_o", "tool.called"),
        ("tu_o.1", "tool.called"),
        ("tu_o.1", "tool.completed"),
        ("tu_o.2", "tool.called"),
        ("tu_o.2", "tool.completed"),
        ("tu_o", "tool.completed"),
    ]

    # The workflow's record activity stores them once the store is back; a retry
    # writes nothing twice, and the parent's chain verifies.
    acts = RecordActivities(sqlite_repo, settings)
    for _ in range(2):
        await ActivityEnvironment().run(acts.record, RecordInput(events=out.pending_events))
    timeline = await sqlite_repo.timeline("s-out", "tu_o")
    assert [(e.event.tool_use_id, e.event.type) for e in timeline] == carried
    assert (await sqlite_repo.verify_chain("s-out")).problems == []


async def test_a_parked_run_returns_at_once_and_resumes_without_running_steps_again(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    """The execute activity never waits for a human: it returns the park (with
    the events the store could not take); a resumed run replays the steps that
    returned (nothing runs twice) and applies the decision to the parked one."""
    from parkgate.durable.payloads import SubCallDecided

    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(tmp_path / "data", workspace, tool_confirmation=PARENT_AUTO)
    store = FlakyStore(sqlite_repo)
    deps = Deps(settings=settings, pipeline=make_pipeline(settings, [TwoWrites]),
                store=cast(HistoryStore, store))
    session = Session(session_id="s-park", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu_f", name="two_writes", input={"text": "f"})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    assert isinstance(verdict.verdict, Execute) and not verdict.plan.local
    prepared = verdict.verdict.prepared
    base = ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash, park_sub_calls=True)

    async def run(inp: ExecuteInput) -> Any:
        return await asyncio.wait_for(
            ActivityEnvironment().run(ExecuteActivities(deps).execute, inp), timeout=10)

    def decided(out: Any, decision: str) -> SubCallDecided:
        sub = out.parked.sub
        return SubCallDecided(request_id=sub.info.request_id, decision=decision,
                              input_hash=sub.prepared.input_hash)

    store.down = True
    first = await run(base)
    store.down = False
    assert first.parked is not None and first.parked.steps == []
    assert first.parked.sub.prepared.call.id == "tu_f.1"
    assert first.parked.sub.info.request_id == sub_call_request_id("s-park", "tu_f.1")
    assert first.parked.expiry_seconds == settings.approval_expiry_seconds
    # Nothing ran; the parent's tool.called travels back to be recorded.
    assert [(e.tool_use_id, e.type) for e in first.parked.pending_events] == [
        ("tu_f", "tool.called")]
    assert not (workspace / "first.txt").exists()

    second = await run(base.model_copy(update={
        "steps": first.parked.steps, "sub_decided": decided(first, "allow")}))
    assert second.parked is not None and second.parked.sub.prepared.call.id == "tu_f.2"
    assert [s.tool_use_id for s in second.parked.steps] == ["tu_f.1"]
    assert (workspace / "first.txt").read_text() == "f"

    (workspace / "first.txt").write_text("changed since")  # a second write would undo this
    third = await run(base.model_copy(update={
        "steps": second.parked.steps, "sub_decided": decided(second, "deny")}))
    assert third.parked is None and third.error_class is None, third.result.text
    assert third.result.text.splitlines() == ["first.txt: ok", "second.txt: user_denied",
                                              "read: ok"]
    assert (workspace / "first.txt").read_text() == "changed since"
    assert not (workspace / "second.txt").exists()
    stored = [(e.event.tool_use_id, e.event.type)
              for e in await sqlite_repo.timeline("s-park", "tu_f")]
    assert stored.count(("tu_f.1", "tool.called")) == 1
    assert ("tu_f", "tool.called") not in stored  # travelled back (the workflow records it)
    assert stored[-1] == ("tu_f", "tool.completed")

    # A decision about other input than the parked sub-call's does not let it run.
    other = decided(first, "allow").model_copy(update={"input_hash": "other"})
    refused = await run(base.model_copy(update={"steps": [], "sub_decided": other}))
    assert refused.parked is not None and refused.parked.sub.prepared.call.id == "tu_f.2"
    assert refused.parked.steps[0].run.error_class == ToolErrorClass.PERMISSION_DENIED
    assert (workspace / "first.txt").read_text() == "changed since"

    # A resumed run that asks a recorded step for something else does not run it.
    steps = [s.model_copy(update={"step_hash": "other"}) for s in second.parked.steps]
    diverged = await run(base.model_copy(update={
        "steps": steps, "sub_decided": decided(second, "deny")}))
    assert diverged.result.text.splitlines()[0] == "first.txt: execution_error"
    assert (workspace / "first.txt").read_text() == "changed since"


class Stubborn:
    """Non-atomic: catches every failure of its first step and tries another."""

    definition = TwoWrites.definition.model_copy(update={"name": "stubborn"})

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        assert context.registry is not None
        try:
            await context.registry.execute("write_file", {"path": "a.txt", "content": "a"})
        except Exception:
            pass
        try:
            await context.registry.execute("write_file", {"path": "b.txt", "content": "b"})
        except Exception:
            pass
        return ToolOutput(content=[TextBlock(text="went on")])

    async def cancel(self) -> bool:
        return False


async def test_a_tool_that_swallows_the_park_runs_nothing_after_it(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(tmp_path / "data", workspace,
                             tool_confirmation={"per_tool": {"stubborn": "auto"}})
    deps = Deps(settings=settings, pipeline=make_pipeline(settings, [Stubborn]),
                store=cast(HistoryStore, sqlite_repo))
    session = Session(session_id="s-stub", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu_s", name="stubborn", input={"text": "s"})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    assert isinstance(verdict.verdict, Execute)
    prepared = verdict.verdict.prepared
    out = await asyncio.wait_for(ActivityEnvironment().run(
        ExecuteActivities(deps).execute,
        ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash, park_sub_calls=True),
    ), timeout=10)
    assert out.parked is not None and out.parked.sub.prepared.call.id == "tu_s.1"
    assert out.parked.steps == []
    assert list(workspace.iterdir()) == []
    stored = [(e.event.tool_use_id, e.event.type)
              for e in await sqlite_repo.timeline("s-stub", "tu_s")]
    assert stored == [("tu_s", "tool.called")]  # no final event: the call is not over


async def test_without_a_waiting_workflow_a_prompted_sub_call_is_refused(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    """An execute input from a workflow that does not wait for sub-calls
    (park_sub_calls unset) refuses them: nothing waits inside the activity."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(tmp_path / "data", workspace, tool_confirmation=PARENT_AUTO)
    deps = Deps(settings=settings, pipeline=make_pipeline(settings, [TwoWrites]),
                store=cast(HistoryStore, sqlite_repo))
    session = Session(session_id="s-old", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu_o", name="two_writes", input={"text": "o"})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    assert isinstance(verdict.verdict, Execute)
    prepared = verdict.verdict.prepared
    out = await asyncio.wait_for(ActivityEnvironment().run(
        ExecuteActivities(deps).execute,
        ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash)), timeout=10)
    assert out.parked is None
    assert out.result.text.splitlines()[:2] == ["first.txt: permission_denied",
                                                "second.txt: permission_denied"]
    assert not (workspace / "first.txt").exists()
