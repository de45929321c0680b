"""Activities in isolation (SDK ActivityEnvironment, real store, real tools)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from temporalio.testing import ActivityEnvironment

from parkgate import ToolContext
from parkgate.activities.classify import ClassifyActivities
from parkgate.activities.deps import Deps
from parkgate.activities.execute import ExecuteActivities
from parkgate.activities.plan import approval_expiry, plan_for
from parkgate.activities.record import RecordActivities
from parkgate.approvals.links import approval_url, token_hash, verify_token
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallRef, CallStatus, HistoryStore
from parkgate.durable.payloads import (
    ApprovalRequest,
    ClassifyInput,
    ExecuteInput,
    RecordInput,
    RevalidateInput,
)
from parkgate.models import (
    Session,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolErrorClass,
    ToolOutput,
    ToolUseBlock,
)
from parkgate.verdicts import NeedsApproval
from tests.fixtures.temporal import make_pipeline, make_settings


def definition(side_effects: SideEffects, expiry: float | None = None) -> ToolDefinition:
    return ToolDefinition(
        name="t",
        description="t",
        input_schema={"type": "object"},
        side_effects=side_effects,
        approval_expiry_seconds=expiry,
    )


def deps_for(store: Any, tmp_path: Path, **overrides: Any) -> Deps:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    settings = make_settings(tmp_path / "data", workspace, **overrides)
    store_ = cast(HistoryStore, store)
    return Deps(settings=settings, pipeline=make_pipeline(settings), store=store_)


def test_expiry_precedence(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, tmp_path, approval_expiry_by_class={"write": 600, "EXECUTE": 0}
    )
    assert approval_expiry(definition(SideEffects.WRITE, 30), settings) == 30  # tool wins
    assert approval_expiry(definition(SideEffects.WRITE, 0), settings) is None  # tool: never
    assert approval_expiry(definition(SideEffects.WRITE), settings) == 600  # class
    assert approval_expiry(definition(SideEffects.EXECUTE), settings) is None  # class: never
    assert approval_expiry(definition(SideEffects.NETWORK), settings) == 24 * 3600  # default
    never = make_settings(tmp_path, tmp_path, approval_expiry_seconds=0)
    assert approval_expiry(definition(SideEffects.NETWORK), never) is None


def test_plan_timeouts_and_locality(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, tmp_path, cancel_grace_seconds=30)
    read = plan_for(definition(SideEffects.READ), settings)
    shell = plan_for(definition(SideEffects.EXECUTE), settings)
    assert read.local and not shell.local
    assert read.start_to_close_seconds == 60 + 30
    assert shell.start_to_close_seconds == 600 + 30
    assert shell.heartbeat_timeout_seconds == settings.execute_heartbeat_timeout_seconds


async def test_create_approval_signs_stores_and_is_idempotent(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    session = Session(
        session_id="s-a", turn_id="t", workspace_path=str(deps.settings.workspace_roots[0])
    )
    call = ToolUseBlock(id="tu", name="write_file", input={"path": "a", "content": "b"})
    verdict = await deps.pipeline.classify(call, session)
    assert isinstance(verdict, NeedsApproval)
    now = datetime.now(UTC)
    req = ApprovalRequest(
        info=verdict.info,
        session=session,
        call=call,
        requested_at=now,
        expires_at=now + timedelta(hours=1),
        workflow_id="call/s-a/tu",
        run_id="r",
    )
    acts = RecordActivities(sqlite_repo, deps.settings)
    env = ActivityEnvironment()
    first = await env.run(acts.create_approval, req)
    second = await env.run(acts.create_approval, req)  # a retry
    assert first.approval == second.approval
    # No link in the result: it would be written to workflow history. Readers
    # derive it (deterministically) from the request id and expiry.
    assert first.approval_url is None and "/approve/" not in first.model_dump_json()
    url = approval_url(deps.settings.public_base_url, deps.settings.signing_secret(),
                       first.approval.request_id, first.approval.expires_at)
    prefix = "https://parkgate.test/approve/"
    assert url.startswith(prefix)
    token = url[len(prefix):]
    rid, exp = verify_token(deps.settings.signing_secret(), token)
    assert rid == verdict.info.request_id and exp == int(req.expires_at.timestamp())
    stored = await sqlite_repo.get_approval(rid)
    assert stored.token_hash == token_hash(token)
    assert token not in stored.model_dump_json()  # only the hash is stored
    events = await sqlite_repo.timeline("s-a", "tu")
    assert [e.event.type for e in events] == ["tool.confirmation_requested"]
    # The stored event carries no link: the token must not reach the history.
    assert token not in events[0].event.model_dump_json()


async def test_record_is_idempotent_on_event_ids(sqlite_repo: Any, tmp_path: Path) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    acts = RecordActivities(sqlite_repo, deps.settings)
    event = ToolEvent(
        type="tool.failed",
        session_id="s-r",
        turn_id="t",
        tool_use_id="tu",
        tool_name="x",
        error_class=ToolErrorClass.NOT_FOUND,
    )
    env = ActivityEnvironment()
    await env.run(acts.record, RecordInput(events=[event]))
    await env.run(acts.record, RecordInput(events=[event]))
    assert len(await sqlite_repo.timeline("s-r", "tu")) == 1


async def test_execute_refuses_when_hash_differs_from_approved(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    workspace = deps.settings.workspace_roots[0]
    session = Session(session_id="s-h", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="write_file", input={"path": "h.txt", "content": "1"})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    assert isinstance(verdict.verdict, NeedsApproval)
    prepared = verdict.verdict.prepared
    # The input was swapped after approval: hashes no longer match.
    tampered = prepared.model_copy(
        update={"call": call.model_copy(update={"input": {"path": "h.txt", "content": "2"}})}
    )
    acts = ExecuteActivities(deps)
    env = ActivityEnvironment()
    out = await env.run(
        acts.execute, ExecuteInput(prepared=tampered, approved_hash=prepared.input_hash)
    )
    assert out.error_class == ToolErrorClass.PERMISSION_DENIED
    assert "differs from the approved input" in out.result.text
    assert not (workspace / "h.txt").exists()

    approved = ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash)
    ok = await env.run(acts.execute, approved)
    assert ok.error_class is None, ok.result.text
    assert (workspace / "h.txt").read_text() == "1"


async def test_revalidate_rejects_escaping_edit(sqlite_repo: Any, tmp_path: Path) -> None:
    deps = deps_for(sqlite_repo, tmp_path)
    workspace = deps.settings.workspace_roots[0]
    (workspace / "inside").mkdir()
    (workspace / "inside" / "link").symlink_to(tmp_path)  # escapes via a symlink
    session = Session(session_id="s-v", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="write_file", input={"path": "a", "content": "b"})
    verdict = await deps.pipeline.classify(call, session)
    assert isinstance(verdict, NeedsApproval)
    acts = ClassifyActivities(deps)
    bad = await acts.revalidate(
        RevalidateInput(
            prepared=verdict.prepared, new_input={"path": "inside/link/x", "content": "b"}
        )
    )
    assert bad.prepared is None and bad.error_class == ToolErrorClass.PERMISSION_DENIED
    good = await acts.revalidate(
        RevalidateInput(prepared=verdict.prepared, new_input={"path": "b", "content": "c"})
    )
    assert good.prepared is not None and good.prepared.call.input["path"] == "b"


async def test_store_outage_during_execution_carries_events_back(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    """A store that fails every write (here: an un-migrated database) never fails the
    tool run; its events and full output travel back for the workflow to record."""
    from parkgate.store import Repository
    from tests.fixtures.db import fresh_sqlite_url

    broken = await Repository.connect(fresh_sqlite_url(tmp_path))
    try:
        deps = deps_for(broken, tmp_path, tool_confirmation={"default": {"WRITE": "auto"}})
        workspace = deps.settings.workspace_roots[0]
        session = Session(session_id="s-o", turn_id="t", workspace_path=str(workspace))
        call = ToolUseBlock(id="tu", name="write_file", input={"path": "o.txt", "content": "o"})
        verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
        prepared = verdict.verdict.prepared  # type: ignore[union-attr]
        out = await ActivityEnvironment().run(
            ExecuteActivities(deps).execute,
            ExecuteInput(prepared=prepared, approved_hash=prepared.input_hash),
        )
    finally:
        await broken.close()
    assert out.error_class is None, out.result.text
    assert (workspace / "o.txt").read_text() == "o"
    assert [e.type for e in out.pending_events] == ["tool.called", "tool.completed"]
    assert out.full_output is not None

    # The workflow's record activity stores them later, once.
    acts = RecordActivities(sqlite_repo, deps.settings)
    for _ in range(2):
        await ActivityEnvironment().run(acts.record, RecordInput(events=out.pending_events))
    events = await sqlite_repo.timeline("s-o", "tu")
    assert [e.event.type for e in events] == ["tool.called", "tool.completed"]


class CountingStore:
    """The real store, counting its write transactions."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.applies = 0

    async def apply(self, events: Any, update: Any = None) -> None:
        self.applies += 1
        await self.inner.apply(events, update)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SlowRead:
    """A READ tool that takes `seconds` (test tool)."""

    definition = ToolDefinition(
        name="slow_read",
        description="Read slowly (test tool).",
        input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
        side_effects=SideEffects.READ,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        await asyncio.sleep(float(input.get("seconds", 0)))
        return ToolOutput(content=[TextBlock(text="slow done")])

    async def cancel(self) -> bool:
        return False


def ref_of(prepared: Any) -> CallRef:
    """Which call a workflow names when it hands the execute activity a call."""
    return CallRef(
        session_id=prepared.session.session_id,
        tool_use_id=prepared.call.id,
        turn_id=prepared.session.turn_id,
        tool_name=prepared.call.name,
        workflow_id=f"call/{prepared.session.session_id}/{prepared.call.id}",
        run_id="r",
    )


async def test_local_read_records_final_row_in_one_write(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    store = CountingStore(sqlite_repo)
    deps = deps_for(store, tmp_path)
    workspace = deps.settings.workspace_roots[0]
    (workspace / "r.txt").write_text("hello")
    session = Session(session_id="s-1w", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="read_file", input={"path": "r.txt"})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    prepared = verdict.verdict.prepared  # type: ignore[union-attr]
    out = await ActivityEnvironment().run(
        ExecuteActivities(deps).execute_local,
        ExecuteInput(
            prepared=prepared, approved_hash=prepared.input_hash, ref=ref_of(prepared)
        ),
    )
    assert out.recorded and out.error_class is None and "hello" in out.result.text
    assert store.applies == 1
    row = await sqlite_repo.get_call("s-1w", "tu")
    assert row.status == CallStatus.SUCCEEDED
    assert row.result is not None and "hello" in row.result.text
    assert row.full_output is not None and row.finished_at is not None
    events = await sqlite_repo.timeline("s-1w", "tu")
    assert [e.event.type for e in events] == ["tool.called", "tool.completed"]


async def test_slow_read_shows_running_before_it_finishes(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    settings = make_settings(tmp_path / "data", workspace)
    deps = Deps(
        settings=settings,
        pipeline=make_pipeline(settings, extra_tools=[SlowRead]),
        store=cast(HistoryStore, sqlite_repo),
    )
    session = Session(session_id="s-slow", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="slow_read", input={"seconds": 1.5})
    verdict = await ClassifyActivities(deps).classify(ClassifyInput(call=call, session=session))
    prepared = verdict.verdict.prepared  # type: ignore[union-attr]
    run = asyncio.create_task(
        ActivityEnvironment().run(
            ExecuteActivities(deps).execute_local,
            ExecuteInput(
                prepared=prepared, approved_hash=prepared.input_hash, ref=ref_of(prepared)
            ),
        )
    )
    seen_running = False
    while not run.done():
        row = await sqlite_repo.get_call("s-slow", "tu")
        if row is not None and row.status == CallStatus.RUNNING:
            seen_running = True
            events = await sqlite_repo.timeline("s-slow", "tu")
            assert [e.event.type for e in events] == ["tool.called"]
            break
        await asyncio.sleep(0.05)
    out = await run
    assert seen_running, "tool.called was held until the end of a 1.5 s read"
    assert out.recorded
    events = await sqlite_repo.timeline("s-slow", "tu")
    assert [e.event.type for e in events] == ["tool.called", "tool.completed"]
    assert (await sqlite_repo.get_call("s-slow", "tu")).status == CallStatus.SUCCEEDED


class FinalWriteGate:
    """The real store; the write carrying the final event waits for `release`
    (so a cancellation can land while the outcome of a finished run is stored)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def apply(self, events: Any, update: Any = None) -> None:
        if any(e.type in ("tool.completed", "tool.failed") for e in events):
            self.reached.set()
            await self.release.wait()
        await self.inner.apply(events, update)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_cancel_arriving_while_a_finished_write_is_recorded_records_success(
    sqlite_repo: Any, tmp_path: Path
) -> None:
    """The decide/cancel race: the activity's cancellation comes with a heartbeat
    response after write_file wrote its file, while the final row is stored.
    The write happened, so the activity completes: stored and reported `succeeded`
    (it used to raise, and the workflow then recorded `cancelled`)."""
    store = FinalWriteGate(sqlite_repo)
    deps = deps_for(store, tmp_path)
    workspace = deps.settings.workspace_roots[0]
    session = Session(session_id="s-cw", turn_id="t", workspace_path=str(workspace))
    call = ToolUseBlock(id="tu", name="write_file", input={"path": "w.txt", "content": "x"})
    verdict = await deps.pipeline.classify(call, session)
    assert isinstance(verdict, NeedsApproval)
    prepared = verdict.prepared
    env = ActivityEnvironment()
    run = asyncio.create_task(env.run(
        ExecuteActivities(deps).execute,
        ExecuteInput(
            prepared=prepared, approved_hash=prepared.input_hash, ref=ref_of(prepared)
        ),
    ))
    await asyncio.wait_for(store.reached.wait(), 10)
    assert (workspace / "w.txt").read_text() == "x"  # the write is done...
    env.cancel()  # ...when the cancellation arrives
    await asyncio.sleep(0.05)
    store.release.set()
    out = await asyncio.wait_for(run, 10)
    assert out.error_class is None and out.recorded and not out.result.is_error
    row = await sqlite_repo.get_call("s-cw", "tu")
    assert row.status == CallStatus.SUCCEEDED
    events = [e.event.type for e in await sqlite_repo.timeline("s-cw", "tu")]
    assert events == ["tool.called", "tool.completed"]
