"""The agent client against the real API, worker and Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.agent_client import (
    AsyncParkgateClient,
    CallNotFinishedError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ParkgateClient,
    ParkgateError,
    UnavailableError,
)
from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock
from parkgate.store.repository import Repository
from tests.agent_client.faults import Flaky
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


@asynccontextmanager
async def served(
    client: Client, repo: Repository, tmp_path: Path, **faults: int
) -> AsyncIterator[tuple[ApiRig, str, Flaky]]:
    """The real app on a real socket, behind optional injected faults."""
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base) as api:
        flaky = Flaky(api.app, **faults)
        async with live_server(flaky, sock):  # type: ignore[arg-type]
            yield api, base, flaky


def write(call_id: str, path: str = "out.txt") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="write_file", input={"path": path, "content": "hi\n"})


async def test_parked_write_is_decided_and_a_redispatch_attaches(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as (api, base, _), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        out = await agent.register_session(sid, str(api.workspace))
        assert out.session_id == sid
        names = {d.name for d in await agent.get_definitions_for_session(sid)}
        assert {"read_file", "write_file"} <= names

        (api.workspace / "a.txt").write_text("alpha")
        read = await agent.dispatch(
            {"type": "tool_use", "id": "toolu_r1", "name": "read_file",
             "input": {"path": "a.txt"}}, sid)
        assert not read.is_error and "alpha" in read.text

        with pytest.raises(CallNotFinishedError) as pending:
            await agent.dispatch(write("toolu_w1"), sid, timeout=1.5)
        assert pending.value.resource.status == CallStatus.PARKED
        assert pending.value.resource.approval_url is None  # the agent never gets the link
        with pytest.raises(ForbiddenError):
            await agent.decide(sid, "toolu_w1", "allow")
        won = await human.decide(sid, "toolu_w1", "allow", reason="fine")
        assert won.accepted and won.decision is not None and won.decision.decision == "allow"
        with pytest.raises(ConflictError) as late:
            await human.decide(sid, "toolu_w1", "deny")
        assert late.value.status == 409

        # The agent "restarts" and dispatches the same block: it attaches.
        result = await agent.dispatch(write("toolu_w1"), sid)
        assert not result.is_error and result.tool_use_id == "toolu_w1"
        assert (api.workspace / "out.txt").read_text() == "hi\n"
        again = await agent.dispatch(write("toolu_w1"), sid)
        assert again == result
        with pytest.raises(ConflictError) as reused:  # same id, another call: refused
            await agent.dispatch(write("toolu_w1", path="elsewhere.txt"), sid)
        assert reused.value.code == "idempotency_conflict"
        events = [e async for e in agent.events(sid, follow=False)]
        ran = [e for e in events if e.tool_use_id == "toolu_w1" and e.type == "tool.completed"]
        assert len(ran) == 1  # executed exactly once

        with pytest.raises(NotFoundError):
            await agent.get_call(sid, "toolu_nope")


async def test_dispatch_all_cancel_and_events_resume_after_cuts(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, cut_streams=2) as (api, base, flaky), \
            AsyncParkgateClient(base, api.key) as agent:
        sid = f"s-{uuid.uuid4().hex[:8]}"
        await agent.register_session(sid, str(api.workspace))
        (api.workspace / "a.txt").write_text("a")
        (api.workspace / "b.txt").write_text("b")
        results = await agent.dispatch_all([
            ToolUseBlock(id="toolu_a", name="read_file", input={"path": "a.txt"}),
            ToolUseBlock(id="toolu_b", name="read_file", input={"path": "b.txt"}),
        ], sid, turn_id="turn1")
        assert [r.tool_use_id for r in results] == ["toolu_a", "toolu_b"]
        assert [r.text.strip()[-1:] for r in results] == ["a", "b"]

        parked = await agent.submit(write("toolu_c"), sid, wait=0)
        assert parked.status in (CallStatus.QUEUED, CallStatus.PARKED)
        while (await agent.get_call(sid, "toolu_c")).status != CallStatus.PARKED:
            await asyncio.sleep(0.05)
        assert (await agent.cancel(sid, "toolu_c", reason="not needed")).cancelled
        cancelled = await agent.dispatch(write("toolu_c"), sid)
        assert cancelled.is_error
        assert cancelled.text.endswith("via api: not needed)."), cancelled.text

        # Two streams are cut after their first event; the client reconnects
        # with Last-Event-ID and sees every event once, in order.
        full = [e async for e in agent.events(sid, follow=False)]
        assert flaky.cut == 2
        seqs = [e.seq for e in full]
        assert seqs == sorted(set(seqs)) and len(seqs) >= 5
        assert flaky.last_event_ids[:3] == [None, str(seqs[0]), str(seqs[1])]
        live: list[int] = []
        async for event in agent.events(sid, after=seqs[1]):
            live.append(event.seq)
            if len(live) == len(seqs) - 2:
                break
        assert live == seqs[2:]


async def test_503_with_retry_after_is_retried_then_raised(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, unavailable=3) as (api, base, flaky):
        async with AsyncParkgateClient(base, api.key) as agent:
            sid = f"s-{uuid.uuid4().hex[:8]}"
            out = await agent.register_session(sid, str(api.workspace))
            assert out.session_id == sid and flaky.answered_503 == 3
        flaky.unavailable = 10
        async with AsyncParkgateClient(base, api.key, max_retries=2) as impatient:
            with pytest.raises(UnavailableError) as exc:
                await impatient.register_session(sid, str(api.workspace))
            assert exc.value.status == 503 and exc.value.code == "unavailable"


async def test_sync_client_does_the_same_from_a_thread(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path, unavailable=1) as (api, base, _):
        (api.workspace / "a.txt").write_text("alpha")
        (api.workspace / "other").mkdir()
        sid = f"s-{uuid.uuid4().hex[:8]}"

        def agent_run() -> list[str]:
            with ParkgateClient(base, api.key) as agent, \
                    ParkgateClient(base, api.human_key) as human:
                agent.register_session(sid, str(api.workspace))
                with pytest.raises(ConflictError) as conflict:
                    agent.register_session(sid, str(api.workspace / "other"))
                assert conflict.value.code == "session_conflict"
                with pytest.raises(ParkgateError) as bad:
                    agent.register_session("s-elsewhere", "/")
                assert bad.value.status == 422 and bad.value.code == "workspace_not_allowed"
                try:
                    agent.dispatch(write("toolu_s1"), sid, timeout=1)
                except CallNotFinishedError as exc:
                    assert exc.resource.status == CallStatus.PARKED
                human.decide(sid, "toolu_s1", "deny", reason="no")
                denied = agent.dispatch(write("toolu_s1"), sid)
                assert denied.is_error and "no" in denied.text
                both = agent.dispatch_all(
                    [ToolUseBlock(id="toolu_s2", name="read_file", input={"path": "a.txt"})],
                    sid)
                assert "alpha" in both[0].text
                return [e.type for e in agent.events(sid, follow=False)]

        types = await asyncio.to_thread(agent_run)
        assert "tool.confirmation_requested" in types and "tool.completed" in types
