"""Composed tools on the durable path (issue 7): real time-skipping server, real store.

- atomic_edit: one confirmation for the whole operation, sub-call events
  recorded in the parent's history (and chain), the file changed;
- a non-atomic composed tool parks each prompted sub-call on its own: the
  execute activity returns the park and the workflow waits (a SubCallApproval
  child workflow); each request is decidable by request id (the path the HTTP
  endpoint, the approval page and the CLI use), first decision wins; expiry
  and cancellation end the sub-call honestly; a resumed run runs no step twice;
- an undeclared sub-tool is refused with permission_denied;
- a store outage: sub-call events travel back and are recorded once.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment

from parkgate.activities.classify import ClassifyActivities
from parkgate.activities.deps import Deps
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.record import RecordActivities
from parkgate.calls.records import CallStatus, HistoryStore
from parkgate.context import ToolContext
from parkgate.durable.payloads import ClassifyInput, ExecuteInput, RecordInput
from parkgate.durable.subcall_approvals import NO_EDITS, sub_call_request_id
from parkgate.models import (
    Session,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolUseBlock,
    utcnow,
)
from parkgate.runtime.devserver import DevServer
from parkgate.verdicts import Execute
from tests.fixtures.temporal import dev_client, durable_rig, make_pipeline, make_settings

# ---------------------------------------------------------------------------
# Test composed tools
# ---------------------------------------------------------------------------


class TwoWrites:
    """Non-atomic: writes first.txt, then second.txt, then reads first.txt back;
    reports each step's outcome (a refused step does not stop the others)."""

    definition = ToolDefinition(
        name="two_writes",
        description="Write two files step by step (test tool).",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        side_effects=SideEffects.WRITE,
        composed_of=["write_file", "read_file"],
        atomic=False,
        timeout_seconds=120,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        assert context.registry is not None
        lines = []
        for name in ("first.txt", "second.txt"):
            run = await context.registry.execute(
                "write_file", {"path": name, "content": input["text"]}
            )
            lines.append(f"{name}: {run.error_class.value if run.error_class else 'ok'}")
        read = await context.registry.execute("read_file", {"path": "first.txt"})
        lines.append(f"read: {read.error_class.value if read.error_class else 'ok'}")
        return ToolOutput(content=[TextBlock(text="\n".join(lines))])

    async def cancel(self) -> bool:
        return False


class Sneaky:
    """Declares read_file only, then tries shell."""

    definition = ToolDefinition(
        name="sneaky",
        description="Reads, then tries an undeclared sub-tool (test tool).",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        side_effects=SideEffects.READ,
        composed_of=["read_file"],
        atomic=True,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        assert context.registry is not None
        read = await context.registry.execute("read_file", {"path": "notes.md"})
        shell = await context.registry.execute("shell", {"command": "touch pwned"})
        return ToolOutput(
            content=[
                TextBlock(
                    text=f"read={read.error_class or 'ok'} shell={shell.error_class or 'ok'}"
                )
            ],
            metadata={"shell_error": shell.error_class, "shell_text": shell.result.text},
        )

    async def cancel(self) -> bool:
        return False


#: The parent composed tool runs without asking; its sub-calls meet the
#: default policy (WRITE prompts, READ runs).
PARENT_AUTO: dict[str, Any] = {"per_tool": {"two_writes": "auto"}}


async def wait_request(store: Any, session_id: str, tool_use_id: str, timeout: float = 30) -> str:
    """The request id of a sub-call's tool.confirmation_requested, once it is stored."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for entry in await store.timeline(session_id, tool_use_id.split(".")[0]):
            ev = entry.event
            if ev.type == "tool.confirmation_requested" and ev.tool_use_id == tool_use_id:
                assert ev.request_id is not None
                return str(ev.request_id)
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"sub-call {tool_use_id} never asked for approval")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------
# Atomic: one approval for the whole operation
# ---------------------------------------------------------------------------


async def test_atomic_edit_durably_one_confirmation_nested_history(
    temporal_env: WorkflowEnvironment, repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, repo, tmp_path) as rig:
        target = rig.workspace / "app.py"
        target.write_text("DEBUG = True\nPORT = 80\n")
        session = rig.session()
        call = ToolUseBlock(
            id="tu_ae",
            name="atomic_edit",
            input={"path": "app.py", "old": "DEBUG = True", "new": "DEBUG = False"},
        )
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_ae")

        # The one approval request names the sub-tools and the file it touches.
        approval = await repo.get_approval(request_id)
        assert approval.info["sub_tools"] == ["read_file", "write_file"]
        assert approval.info["files"] == ["app.py"]
        assert "-DEBUG = True" in approval.info["diff"]
        assert target.read_text() == "DEBUG = True\nPORT = 80\n"  # nothing ran yet

        winner = await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="ann")
        assert winner == "allow"
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert target.read_text() == "DEBUG = False\nPORT = 80\n"

        timeline = await repo.timeline(session.session_id, "tu_ae")
        steps = [(e.event.tool_use_id, e.event.type) for e in timeline]
        assert steps == [
            ("tu_ae", "tool.confirmation_requested"),
            ("tu_ae", "tool.confirmation_resolved"),
            ("tu_ae", "tool.called"),
            ("tu_ae.1", "tool.called"),
            ("tu_ae.1", "tool.completed"),
            ("tu_ae.2", "tool.called"),
            ("tu_ae.2", "tool.completed"),
            ("tu_ae", "tool.completed"),
        ]
        # Exactly one confirmation for the whole operation.
        assert sum(e.event.type == "tool.confirmation_requested" for e in timeline) == 1
        assert len(await repo.approvals_for_call(session.session_id, "tu_ae")) == 1
        subs = [e.event for e in timeline if e.event.tool_use_id != "tu_ae"]
        assert {e.parent_tool_use_id for e in subs} == {"tu_ae"}
        assert [e.tool_name for e in subs] == ["read_file"] * 2 + ["write_file"] * 2
        assert len({e.event_id for e in (x.event for x in timeline)}) == len(timeline)
        write_called = subs[2]
        assert write_called.data["rule"].startswith("atomic:atomic_edit approval covers")
        # Sub-call events join the parent's chain, which verifies.
        assert all(e.event.chain_id == "tu_ae" for e in timeline)
        report = await repo.verify_chain(session.session_id)
        assert report.problems == [], report.problems

        row = await repo.get_call(session.session_id, "tu_ae")
        assert row.status == CallStatus.SUCCEEDED and row.decided_by == "ann"
        # No rows of their own for sub-calls: they live in the parent's history.
        assert await repo.get_call(session.session_id, "tu_ae.1") is None


async def test_atomic_checked_edit_rolls_back_on_failed_check_durably(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(temporal_env.client, sqlite_repo, tmp_path) as rig:
        target = rig.workspace / "v.txt"
        target.write_text("version=1\n")
        session = rig.session()
        call = ToolUseBlock(
            id="tu_chk",
            name="atomic_edit_checked",
            input={"path": "v.txt", "old": "1", "new": "2", "check": "grep -q 3 v.txt"},
        )
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_chk")
        approval = await sqlite_repo.get_approval(request_id)
        assert approval.info["sub_tools"] == ["read_file", "write_file", "shell"]
        await rig.dispatcher.resolve_confirmation(request_id, "allow", decided_by="ann")
        outcome = await handle.result()
        assert outcome.error_class == ToolErrorClass.EXECUTION_ERROR
        assert "restored" in outcome.result.text
        assert target.read_text() == "version=1\n"
        timeline = await sqlite_repo.timeline(session.session_id, "tu_chk")
        sub_ids = [e.event.tool_use_id for e in timeline if e.event.parent_tool_use_id]
        assert sorted(set(sub_ids)) == ["tu_chk.1", "tu_chk.2", "tu_chk.3", "tu_chk.4"]
        assert sum(e.event.type == "tool.confirmation_requested" for e in timeline) == 1


# ---------------------------------------------------------------------------
# Non-atomic: every prompted sub-call parks on its own
# ---------------------------------------------------------------------------


async def test_non_atomic_composed_tool_parks_each_sub_call(
    temporal_env: WorkflowEnvironment, repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(
        temporal_env.client, repo, tmp_path, policy=PARENT_AUTO, extra_tools=[TwoWrites]
    ) as rig:
        session = rig.session()
        sid = session.session_id
        call = ToolUseBlock(id="tu_two", name="two_writes", input={"text": "hello"})
        handle = await rig.dispatcher.start(call, session)

        # Step 1 parks with its own request; decided by request id alone (locate path).
        first = await wait_request(repo, sid, "tu_two.1")
        assert first == sub_call_request_id(sid, "tu_two.1")
        approval = await repo.get_approval(first)
        assert approval.tool_use_id == "tu_two.1" and approval.tool_name == "write_file"
        assert approval.info["parent_tool_use_id"] == "tu_two"
        assert approval.info["input"] == {"path": "first.txt", "content": "hello"}
        assert approval.expires_at is not None
        edits = await rig.dispatcher.decide(
            first, "allow_with_edits", edited_input={"path": "x.txt", "content": "x"}
        )
        assert not edits.accepted and edits.message == NO_EDITS
        won = await rig.dispatcher.resolve_confirmation(first, "allow", decided_by="ann")
        assert won == "allow"
        late = await rig.dispatcher.decide(first, "deny", decided_by="bob")
        assert not late.accepted and late.winner is not None
        assert late.winner.decided_by == "ann" and late.message.startswith("already decided")

        # Step 2 parks next; denied the way the HTTP layer and the CLI send it
        # (with the session and tool_use_id of the approval record).
        second = await wait_request(repo, sid, "tu_two.2")
        assert second != first
        denied = await rig.dispatcher.decide(
            second, "deny", reason="not that one", decided_by="ann", via="link",
            session_id=sid, tool_use_id="tu_two.2",
        )
        assert denied.accepted and denied.winner is not None
        assert denied.winner.decision == "deny"

        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert outcome.result.text.splitlines() == [
            "first.txt: ok",
            "second.txt: user_denied",
            "read: ok",
        ]
        assert (rig.workspace / "first.txt").read_text() == "hello"
        assert not (rig.workspace / "second.txt").exists()

        timeline = await repo.timeline(sid, "tu_two")
        steps = [(e.event.tool_use_id, e.event.type) for e in timeline]
        assert steps == [
            ("tu_two", "tool.called"),
            ("tu_two.1", "tool.confirmation_requested"),
            ("tu_two.1", "tool.confirmation_resolved"),
            ("tu_two.1", "tool.called"),
            ("tu_two.1", "tool.completed"),
            ("tu_two.2", "tool.confirmation_requested"),
            ("tu_two.2", "tool.confirmation_resolved"),
            ("tu_two.2", "tool.failed"),
            ("tu_two.3", "tool.called"),
            ("tu_two.3", "tool.completed"),
            ("tu_two", "tool.completed"),
        ]
        by_key = {(e.event.tool_use_id, e.event.type): e.event for e in timeline}
        assert by_key[("tu_two.1", "tool.confirmation_resolved")].data["decided_by"] == "ann"
        assert by_key[("tu_two.2", "tool.failed")].error_class == ToolErrorClass.USER_DENIED
        assert "not that one" in (by_key[("tu_two.2", "tool.failed")].message or "")
        assert by_key[("tu_two.1", "tool.called")].data["rule"] == f"confirmation:{first}"
        assert (await repo.verify_chain(sid)).problems == []

        # After the call ended, a sub-call request can no longer be decided.
        stale = await repo.get_approval(second)
        assert stale.decision == "deny" and stale.via == "link"
        after = await rig.dispatcher.decide(first, "allow", decided_by="carl")
        assert not after.accepted

        # Retention: pruning the finished call takes its sub-calls' approvals along.
        assert await repo.prune(timedelta(0), now=utcnow() + timedelta(seconds=1)) == 1
        assert await repo.get_approval(first) is None
        assert await repo.get_approval(second) is None


async def test_approved_composed_call_then_parks_its_sub_calls(
    temporal_env: WorkflowEnvironment, sqlite_repo: Any, tmp_path: Path
) -> None:
    """A non-atomic composed call that itself needed approval: its own decision
    is stored once, before the run; its sub-calls then park and resume as usual."""
    async with durable_rig(
        temporal_env.client, sqlite_repo, tmp_path, extra_tools=[TwoWrites]
    ) as rig:
        session = rig.session()
        sid = session.session_id
        handle = await rig.dispatcher.start(
            ToolUseBlock(id="tu_ap", name="two_writes", input={"text": "a"}), session)
        own = await rig.wait_parked(sid, "tu_ap")
        assert (await rig.dispatcher.decide(own, "allow", decided_by="ann")).accepted
        first = await wait_request(sqlite_repo, sid, "tu_ap.1")
        assert first != own
        assert (await rig.dispatcher.decide(first, "allow", decided_by="bob")).accepted
        second = await wait_request(sqlite_repo, sid, "tu_ap.2")
        assert (await rig.dispatcher.decide(second, "deny", decided_by="bob")).accepted
        outcome = await handle.result()
        assert outcome.result.text.splitlines() == [
            "first.txt: ok", "second.txt: user_denied", "read: ok"]
        steps = [(e.event.tool_use_id, e.event.type)
                 for e in await sqlite_repo.timeline(sid, "tu_ap")]
        assert steps[:3] == [("tu_ap", "tool.confirmation_requested"),
                             ("tu_ap", "tool.confirmation_resolved"), ("tu_ap", "tool.called")]
        assert steps.count(("tu_ap", "tool.confirmation_resolved")) == 1
        assert steps.count(("tu_ap", "tool.called")) == 1
        assert steps[-1] == ("tu_ap", "tool.completed")
        row = await sqlite_repo.get_call(sid, "tu_ap")
        assert row.status == CallStatus.SUCCEEDED and row.decided_by == "ann"
        assert (await sqlite_repo.get_approval(first)).decided_by == "bob"
        assert (await sqlite_repo.verify_chain(sid)).problems == []


@pytest.mark.devserver
async def test_sub_call_request_is_announced_to_webhooks(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """On the dev server: the second step is denied while its notice may still
    be in flight, and cancelling an activity in the task that completes it
    wedges a workflow on the time-skipping server only (temporalio/sdk-java#2391,
    ACTIVITY_UNKNOWN); the real server carries on."""
    from parkgate.approvals.links import token_hash
    from parkgate.settings.entries import Webhook
    from tests.api.rig import WebhookSink

    async with WebhookSink().running() as sink, durable_rig(
        await dev_client(dev_server),
        sqlite_repo,
        tmp_path,
        policy=PARENT_AUTO,
        extra_tools=[TwoWrites],
        webhooks=[Webhook(url=sink.url)],
    ) as rig:
        session = rig.session()
        sid = session.session_id
        handle = await rig.dispatcher.start(
            ToolUseBlock(id="tu_wh", name="two_writes", input={"text": "w"}), session
        )
        first = await wait_request(sqlite_repo, sid, "tu_wh.1")
        for _ in range(200):
            if sink.received:
                break
            await asyncio.sleep(0.05)
        body = sink.received[0]["body"]
        assert body["request_id"] == first and body["tool_use_id"] == "tu_wh.1"
        assert body["tool_name"] == "write_file"
        url = body["approval_url"]
        assert url.startswith("https://parkgate.test/approve/")
        approval = await sqlite_repo.get_approval(first)
        assert token_hash(url.rsplit("/", 1)[1]) == approval.token_hash
        await rig.dispatcher.resolve_confirmation(first, "deny", decided_by="ann")
        second = await wait_request(sqlite_repo, sid, "tu_wh.2")
        await rig.dispatcher.resolve_confirmation(second, "deny", decided_by="ann")
        outcome = await handle.result()
        assert outcome.result.text.splitlines()[:2] == [
            "first.txt: user_denied",
            "second.txt: user_denied",
        ]


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


class FlakyStore:
    """Fault injection: the real repository behind a switch; while `down`, every
    write fails like an unreachable database."""

    def __init__(self, repo: Any) -> None:
        self.repo = repo
        self.down = False

    async def apply(self, events: Any, update: Any = None) -> None:
        if self.down:
            raise ConnectionError("history store unreachable (injected)")
        await self.repo.apply(events, update)

    async def save_approval(self, approval: Any) -> None:
        if self.down:
            raise ConnectionError("history store unreachable (injected)")
        await self.repo.save_approval(approval)

    async def decide_approval(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise ConnectionError("history store unreachable (injected)")
        return await self.repo.decide_approval(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.repo, name)


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
