"""`gate`: the agent's own functions behind parkgate, against the real API,
worker, Temporal dev server and database. Each function counts its runs: the
contract under test is that it runs at most once, and never unless released."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.agent_client import (
    AsyncParkgateClient,
    CallNotFinishedError,
    NotFoundError,
    OutcomeNotRecordedError,
    ParkedError,
    ParkgateClient,
    gate,
    tool_gate,
)
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


@asynccontextmanager
async def stack(client: Client, repo: Repository, tmp_path: Path,
                **settings: Any) -> AsyncIterator[tuple[ApiRig, str]]:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base, **settings) as api, \
            live_server(api.app, sock):
        yield api, base


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


async def parked(human: AsyncParkgateClient, session_id: str, call_id: str) -> None:
    """Wait until the call waits for a human (the gate is blocked inside it)."""
    for _ in range(400):
        try:
            if (await human.get_call(session_id, call_id)).status.value == "parked":
                return
        except NotFoundError:  # not submitted yet
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{call_id} never parked")


async def test_an_allowed_call_runs_once_and_a_restarted_agent_attaches(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent:
        s = sid()

        @gate(client=agent, session=s, side_effects="read", workspace=str(api.workspace))
        async def lookup(key: str) -> dict[str, str]:
            """Look a key up in the agent's own table."""
            runs.append(key)
            return {"key": key, "value": key.upper()}

        result = await lookup.call({"key": "abc"}, tool_use_id="g-read-1")
        assert not result.is_error and result.text == '{"key": "abc", "value": "ABC"}'
        row = await agent.get_call(s, "g-read-1")
        assert row.status.value == "succeeded" and row.tool_name == "lookup"
        listed = {t["name"]: t for t in (await agent.tools(s)).tools}  # registered for us
        assert listed["lookup"]["client_executed"] is True
        assert listed["lookup"]["description"] == "Look a key up in the agent's own table."

    # A restarted agent (a new client, a new gate) calls again with the same id.
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as restarted:
        again = gate(lambda key: runs.append(key), client=restarted, session=s,
                     side_effects="read", name="lookup",
                     description="Look a key up in the agent's own table.",
                     workspace=str(api.workspace))
        attached = await again.call({"key": "abc"}, tool_use_id="g-read-1")
        assert attached.text == result.text and not attached.is_error
    assert runs == ["abc"]  # ran once, in the first process


async def test_a_write_parks_and_runs_after_approval_with_the_edited_input(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    received: list[tuple[str, int]] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        gates = tool_gate(agent, s, str(api.workspace))

        @gates.gate(side_effects="write")
        def transfer(account: str, cents: int) -> str:
            """Move money (a sync function: it runs in a thread)."""
            received.append((account, cents))
            return f"moved {cents} to {account}"

        task = asyncio.create_task(transfer.call({"account": "acme", "cents": 900},
                                                 tool_use_id="g-write-1"))
        await parked(human, s, "g-write-1")
        assert received == [] and not task.done()
        await human.decide(s, "g-write-1", "allow_with_edits",
                           edited_input={"account": "acme", "cents": 90})
        result = await asyncio.wait_for(task, 60)
        assert received == [("acme", 90)]  # the released (edited) arguments
        note, output = result.text.split("\n", 1)[0], result.text.rsplit("\n", 1)[-1]
        assert output == "moved 90 to acme" and not result.is_error
        assert note.startswith("Note: the approver changed") and "- cents: 900 -> 90" in result.text
        r = await api.http.get(f"/v1/sessions/{s}/tool-calls/g-write-1/events")
        types = [e["type"] for e in r.json()["events"]]
        assert types.count("tool.released") == 1 and types.count("tool.claimed") == 1
        assert types.count("tool.completed") == 1


async def test_a_denied_call_never_runs_and_the_reason_comes_back(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()

        @gate(client=agent, session=s, side_effects="execute", workspace=str(api.workspace))
        async def deploy(service: str) -> str:
            """Deploy a service."""
            runs.append(service)
            return "deployed"

        task = asyncio.create_task(deploy.call({"service": "api"}, tool_use_id="g-deny-1"))
        await parked(human, s, "g-deny-1")
        await human.decide(s, "g-deny-1", "deny", reason="not on a Friday")
        result = await asyncio.wait_for(task, 60)
        assert result.is_error and "not on a Friday" in result.text
        assert runs == []
        # Calling again attaches to the denial: still never runs.
        again = await deploy.call({"service": "api"}, tool_use_id="g-deny-1")
        assert again.is_error and "not on a Friday" in again.text and runs == []


async def test_an_agent_that_does_not_block_gets_parked_and_attaches_later(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()

        @gate(client=agent, session=s, side_effects="write", wait=0,
              workspace=str(api.workspace))
        async def publish(post: str) -> str:
            """Publish a post."""
            runs.append(post)
            return "published"

        with pytest.raises(ParkedError) as exc:
            await publish.call({"post": "hello"}, tool_use_id="g-park-1")
        assert exc.value.tool_use_id == "g-park-1" and exc.value.request_id
        assert exc.value.resource.status.value == "parked" and runs == []
        await human.decide(s, "g-park-1", "allow")
        result = await publish.call({"post": "hello"}, tool_use_id="g-park-1", wait=30)
        assert result.text == "published" and runs == ["hello"]

        @gate(client=agent, session=s, side_effects="read", wait=0)
        async def peek(post: str) -> str:
            """Read a post (policy allows reads: nothing to wait for)."""
            runs.append(f"peek {post}")
            return "seen"

        assert (await peek(post="hello")).text == "seen" and runs[-1] == "peek hello"


async def test_an_exception_is_reported_as_is_error_and_raised_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[int] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent:
        s = sid()

        @gate(client=agent, session=s, side_effects="none", workspace=str(api.workspace))
        async def divide(a: int, b: int) -> float:
            """Divide a by b."""
            runs.append(b)
            return a / b

        with pytest.raises(ZeroDivisionError):
            await divide.call({"a": 1, "b": 0}, tool_use_id="g-raise-1")
        row = await agent.get_call(s, "g-raise-1")
        assert row.status.value == "failed"
        recorded = await divide.call({"a": 1, "b": 0}, tool_use_id="g-raise-1")
        assert recorded.is_error and "ZeroDivisionError" in recorded.text
        assert runs == [0]


async def test_concurrent_agents_on_one_call_run_it_exactly_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Several processes (each its own client and gate) attach to one call:
    one claim wins and runs it; the others get its recorded result."""
    runs: list[int] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        s = sid()
        clients = [AsyncParkgateClient(base, api.key) for _ in range(6)]
        try:
            async def bump(n: int) -> str:
                """Increment a counter."""
                runs.append(n)
                await asyncio.sleep(0.2)  # hold the claim while the others try
                return f"bumped {n}"

            gated = [gate(bump, client=c, session=s, side_effects="read",
                          workspace=str(api.workspace)) for c in clients]
            results = await asyncio.gather(*(
                g.call({"n": 7}, tool_use_id="g-race-1") for g in gated))
        finally:
            for c in clients:
                await c.aclose()
        assert runs == [7]
        assert {r.text for r in results} == {"bumped 7"}


async def test_twenty_agents_waiting_on_one_parked_call_run_it_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """Twenty agent processes (each its own client and gate) wait on one call
    while it is parked, their long-polls inside the API when it is approved:
    one approval, the function runs once, all twenty get its result, and the
    audit shows one started claim and one outcome (issue 36)."""
    runs: list[int] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()
        clients = [AsyncParkgateClient(base, api.key) for _ in range(20)]
        try:
            async def bump(n: int) -> str:
                """Increment a counter."""
                runs.append(n)
                await asyncio.sleep(0.2)  # hold the claim while the others try
                return f"bumped {n}"

            gated = [gate(bump, client=c, session=s, side_effects="write",
                          workspace=str(api.workspace)) for c in clients]
            waiting = asyncio.gather(*(g.call({"n": 7}, tool_use_id="g-race-20")
                                       for g in gated))
            await parked(human, s, "g-race-20")
            await asyncio.sleep(0.5)  # every agent is waiting on it
            assert runs == []
            await human.decide(s, "g-race-20", "allow")
            results = await asyncio.wait_for(waiting, 120)
        finally:
            for c in clients:
                await c.aclose()
        assert runs == [7]
        assert {r.text for r in results} == {"bumped 7"}
        assert not any(r.is_error for r in results)
        types = [e.type for e in await api.repo.call_events(s, "g-race-20")]
        for kind in ("tool.confirmation_requested", "tool.released", "tool.claim_started",
                     "tool.outcome_reported", "tool.completed"):
            assert types.count(kind) == 1, (kind, types)
        meaning = await api.repo.verify_meaning(s)
        assert meaning.ok, [p.describe() for p in meaning.problems]


async def test_the_blocking_gate_decorator_runs_in_a_thread(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base):
        s = sid()

        def agent_thread() -> tuple[str, str]:
            with ParkgateClient(base, api.key) as pg:
                @gate(client=pg, session=s, side_effects="read", workspace=str(api.workspace))
                def greet(name: str, punctuation: str = "!") -> str:
                    """Greet someone."""
                    runs.append(name)
                    return f"hello {name}{punctuation}"

                first = greet("ada")  # a plain call: a fresh tool_use_id
                second = greet.call({"name": "bob"}, tool_use_id="g-sync-1")
                return first.text, second.text

        assert await asyncio.to_thread(agent_thread) == ("hello ada!", "hello bob!")
        assert runs == ["ada", "bob"]


async def test_a_call_claimed_by_a_process_that_died_is_never_run_again(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """The first process claimed, started (it may have run the tool) and died: a
    restarted agent attaches with the same id, never runs the function, and gets
    outcome_unknown when the lease ends."""
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent:
        s = sid()

        @gate(client=agent, session=s, side_effects="read", workspace=str(api.workspace))
        async def charge(order: str) -> str:
            """Charge an order."""
            runs.append(order)
            return "charged"

        gates = tool_gate(agent, s)
        first = await gates.submit("charge", {"order": "o-1"}, tool_use_id="g-dead-1")
        assert first.status.value == "released"
        claim = await agent.claim(s, "g-dead-1", lease_seconds=2)
        assert claim.input == {"order": "o-1"} and claim.claim_id is not None
        await agent.start(s, "g-dead-1", claim.claim_id)  # ... and the process dies

        result = await charge.call({"order": "o-1"}, tool_use_id="g-dead-1")
        assert result.is_error and runs == []
        assert (await agent.get_call(s, "g-dead-1")).status.value == "outcome_unknown"


async def test_an_outcome_after_the_lease_is_recorded_late_and_returned(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent:
        s = sid()

        @gate(client=agent, session=s, side_effects="read", lease_seconds=1,
              workspace=str(api.workspace))
        async def slow(job: str) -> str:
            """A job that outlives its lease."""
            while (await agent.get_call(s, "g-late-1")).status.value != "outcome_unknown":
                await asyncio.sleep(0.1)
            return f"{job} finished late"

        result = await slow.call({"job": "j"}, tool_use_id="g-late-1")
        assert result.text == "j finished late" and not result.is_error  # what ran here
        row = await agent.get_call(s, "g-late-1")
        assert row.status.value == "outcome_unknown"  # the call's record stands
        r = await api.http.get(f"/v1/sessions/{s}/tool-calls/g-late-1/events")
        types = [e["type"] for e in r.json()["events"]]
        assert "tool.lease_expired" in types and "tool.outcome_late" in types


async def test_plain_calls_with_the_same_input_attach_to_the_parked_call(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """A non-blocking agent calling the function plainly (a fresh id each time)
    attaches to its still-parked call instead of parking another."""
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent, \
            AsyncParkgateClient(base, api.human_key) as human:
        s = sid()

        @gate(client=agent, session=s, side_effects="write", wait=0,
              workspace=str(api.workspace))
        async def rename(old: str, new: str) -> str:
            """Rename a thing."""
            runs.append(new)
            return f"{old} -> {new}"

        with pytest.raises(ParkedError) as first:
            await rename("a", "b")
        with pytest.raises(ParkedError) as second:
            await rename("a", "b")
        assert second.value.tool_use_id == first.value.tool_use_id
        await human.decide(s, first.value.tool_use_id, "allow")
        # Decided: only the parked twin attaches by input; the agent resumes it by id.
        result = await rename.call({"old": "a", "new": "b"},
                                   tool_use_id=first.value.tool_use_id, wait=30)
        assert result.text == "a -> b" and runs == ["b"]


class OutcomeOutage:
    """The real app, but the first `failures` outcome reports get 503 (parkgate
    restarting just after the function ran)."""

    def __init__(self, app: Any, failures: int) -> None:
        self.app = app
        self.failures = failures
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/outcome") \
                and self.refused < self.failures:
            self.refused += 1
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body",
                        "body": b'{"error":{"code":"unavailable","message":"restarting"}}'})
            return
        await self.app(scope, receive, send)


async def test_the_outcome_is_resent_until_parkgate_answers(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    runs: list[str] = []
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api:
        outage = OutcomeOutage(api.app, failures=2)
        async with live_server(outage, sock), \
                AsyncParkgateClient(base, api.key, max_retries=0) as agent:  # type: ignore[arg-type]
            s = sid()

            @gate(client=agent, session=s, side_effects="read", workspace=str(api.workspace))
            async def stamp(doc: str) -> str:
                """Stamp a document."""
                runs.append(doc)
                return f"stamped {doc}"

            result = await stamp.call({"doc": "d"}, tool_use_id="g-outage-1")
            assert result.text == "stamped d" and runs == ["d"] and outage.refused == 2
            row = await agent.get_call(s, "g-outage-1")
            assert row.status.value == "succeeded" and row.result is not None
            assert row.result.text == "stamped d"


async def test_the_gate_gives_up_reporting_when_it_says_it_does(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """parkgate unreachable for the outcome past the lease and the late-report
    window: with the client's default retries (forever), the gate still stops
    there and raises OutcomeNotRecordedError with what the function produced,
    instead of resending forever."""
    from parkgate.agent_client import _gate_common

    monkeypatch.setattr(_gate_common, "LATE_REPORT_SECONDS", 1)
    runs: list[str] = []
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api:
        outage = OutcomeOutage(api.app, failures=10**6)
        async with live_server(outage, sock), AsyncParkgateClient(base, api.key) as agent:
            s = sid()

            @gate(client=agent, session=s, side_effects="read", lease_seconds=1,
                  workspace=str(api.workspace))
            async def stamp(doc: str) -> str:
                """Stamp a document."""
                runs.append(doc)
                return f"stamped {doc}"

            with pytest.raises(OutcomeNotRecordedError) as lost:
                await asyncio.wait_for(stamp.call({"doc": "d"}, tool_use_id="g-gone-1"), 60)
            assert lost.value.result.text == "stamped d" and runs == ["d"]
            assert outage.refused >= 1


async def test_dispatch_of_a_client_tool_stops_at_released_and_the_gate_takes_over(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    """`dispatch` cannot run a client tool: it returns at `released` (never a
    busy wait on a long-poll that answers at once) and the gate runs it."""
    runs: list[str] = []
    async with stack(dev_temporal, sqlite_repo, tmp_path) as (api, base), \
            AsyncParkgateClient(base, api.key) as agent:
        s = sid()

        @gate(client=agent, session=s, side_effects="read", workspace=str(api.workspace))
        async def ping(host: str) -> str:
            """Probe a host."""
            runs.append(host)
            return "up"

        await tool_gate(agent, s).register()
        block = {"id": "g-dispatch-1", "name": "ping", "input": {"host": "h"}}
        with pytest.raises(CallNotFinishedError, match="released for its client") as exc:
            await agent.dispatch(block, s)
        assert exc.value.resource.input == {"host": "h"} and runs == []
        result = await ping.call({"host": "h"}, tool_use_id="g-dispatch-1")
        assert result.text == "up" and runs == ["h"]
