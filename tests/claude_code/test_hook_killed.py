"""Claude Code's hook killed before the call ran (issue 36), and outcomes filed
on the call they name (issue 36, item 6).

The real command hook (`parkgate hook claude-code`, a process per event) is
SIGKILLed before its call parked, while parked, or leaves a claim it received
unstarted; the call is
approved once. Its retry with the same tool_use_id, or Claude Code's model
retrying the same tool and input under a fresh id, gets the call allowed
within seconds and runs it once; the fresh id's PostToolUse is recorded on
the call it attached to, and a PostToolUse of an id parkgate never saw is
recorded on no other call. Real API on a socket, worker, Temporal dev server.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.agent_client import AsyncParkgateClient
from parkgate.calls.events import make_event_id
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters
from tests.agent_client.test_gate import parked, stack
from tests.api.rig import ApiRig

PARKGATE = Path(sys.executable).parent / "parkgate"
#: As in test_killed_agent: a restart that waited for the reservation to lapse fails.
RESERVE_SECONDS = 600.0
ALLOWED_WITHIN = 30.0


def pre(api: ApiRig, session: str, tid: str, text: str = "x\n") -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": session, "cwd": str(api.workspace),
            "tool_name": "Write", "tool_use_id": tid,
            "tool_input": {"file_path": str(api.workspace / "n.txt"), "content": text}}


def post(event: dict[str, Any], tid: str, response: str) -> dict[str, Any]:
    return {**event, "hook_event_name": "PostToolUse", "tool_use_id": tid,
            "tool_response": response}


async def hook(base: str, key: str, event: dict[str, Any]) -> asyncio.subprocess.Process:
    """The command hook Claude Code starts for one event (stdin: the event)."""
    proc = await asyncio.create_subprocess_exec(
        str(PARKGATE), "hook", "claude-code", "--url", base, "--timeout", "120",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PARKGATE_API_KEY": key})
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(event).encode())
    await proc.stdin.drain()
    proc.stdin.close()
    return proc


async def verdict(proc: asyncio.subprocess.Process) -> str:
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    answer = json.loads(out)["hookSpecificOutput"]
    return f"{answer['permissionDecision']}: {answer.get('permissionDecisionReason', '')}"


@pytest.mark.parametrize("point", ["parked", "reserved"])
@pytest.mark.parametrize("retry", ["same id", "fresh id"])
async def test_a_killed_hook_then_one_approval_runs_the_call_once(
    point: str, retry: str, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    async with stack(dev_temporal, sqlite_repo, tmp_path, claude_code_wait_seconds=60,
                     client_reserve_seconds=RESERVE_SECONDS) as (api, base), \
            AsyncParkgateClient(base, api.human_key) as human:
        session, tid = str(uuid.uuid4()), f"toolu_{uuid.uuid4().hex[:12]}"
        first = pre(api, session, tid)
        if point == "parked":
            dead = await hook(base, api.key, first)
            await parked(human, session, tid)
            os.kill(dead.pid, signal.SIGKILL)  # its request still waits inside the API
            await dead.wait()
            await human.decide(session, tid, "allow")
        else:  # the hook process got the allow and died before starting the claim
            waiting = asyncio.ensure_future(api.http.post(
                "/v1/hooks/claude-code", params={"confirm": "true"}, json=first))
            await parked(human, session, tid)
            await human.decide(session, tid, "allow")
            r = await waiting
            assert r.json()["hookSpecificOutput"]["permissionDecision"] == "allow", r.text
            assert r.json()["parkgate_start"]["tool_use_id"] == tid
            assert (await human.get_call(session, tid)).status.value == "claimed"
        approved = time.monotonic()
        again_id = tid if retry == "same id" else f"toolu_{uuid.uuid4().hex[:12]}"
        again = pre(api, session, again_id)
        said = await verdict(await hook(base, api.key, again))
        assert said.startswith("allow"), said
        assert time.monotonic() - approved < ALLOWED_WITHIN
        # Claude Code runs it now, once; its PostToolUse names the id it ran under.
        reported = await verdict_post(base, api.key, post(again, again_id, "wrote n.txt"))
        assert reported == 0
        row = await human.get_call(session, tid)
        assert row.status.value == "succeeded", row
        assert row.result is not None and row.result.text == "wrote n.txt"
        events = await api.repo.call_events(session, tid)
        types = [e.type for e in events]
        assert types.count("tool.confirmation_requested") == 1, types  # one approval
        assert types.count("tool.claim_started") == 1 and "tool.lease_expired" not in types
        if retry == "fresh id":
            assert await api.repo.get_call(session, again_id) is None  # attached, not parked
        meaning = await api.repo.verify_meaning(session)
        assert meaning.ok, [p.describe() for p in meaning.problems]


@pytest.mark.parametrize("retry", ["same id", "fresh id"])
async def test_a_hook_killed_before_the_park_then_one_approval_runs_the_call_once(
    retry: str, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """Killed as soon as it started (its event may or may not have reached
    parkgate): the retry parks or attaches to the call, one approval allows it
    within seconds, it runs once and its PostToolUse is its outcome."""
    async with stack(dev_temporal, sqlite_repo, tmp_path, claude_code_wait_seconds=60,
                     client_reserve_seconds=RESERVE_SECONDS) as (api, base), \
            AsyncParkgateClient(base, api.human_key) as human:
        session, tid = str(uuid.uuid4()), f"toolu_{uuid.uuid4().hex[:12]}"
        dead = await hook(base, api.key, pre(api, session, tid))
        os.kill(dead.pid, signal.SIGKILL)
        await dead.wait()
        again_id = tid if retry == "same id" else f"toolu_{uuid.uuid4().hex[:12]}"
        again = pre(api, session, again_id)
        retrying = await hook(base, api.key, again)

        async def waiting() -> str:
            for _ in range(1200):
                rows = await api.repo.list_calls(CallFilters(session_id=session), limit=5)
                found = [r for r in rows.items if r.status.value == "parked"]
                if found:
                    assert len(rows.items) == 1, rows.items  # one call, never two
                    return found[0].tool_use_id
                await asyncio.sleep(0.05)
            raise AssertionError("the retry never parked")
        cid = await waiting()
        await parked(human, session, cid)
        await human.decide(session, cid, "allow")
        approved = time.monotonic()
        said = await verdict(retrying)
        assert said.startswith("allow"), said
        assert time.monotonic() - approved < ALLOWED_WITHIN
        assert await verdict_post(base, api.key, post(again, again_id, "wrote n.txt")) == 0
        row = await human.get_call(session, cid)
        assert row.status.value == "succeeded" and row.result is not None
        assert row.result.text == "wrote n.txt"
        rows = await api.repo.list_calls(CallFilters(session_id=session), limit=5)
        assert [r.tool_use_id for r in rows.items] == [cid]  # attached, never a second call
        types = [e.type for e in await api.repo.call_events(session, cid)]
        assert types.count("tool.confirmation_requested") == 1, types  # one approval
        assert types.count("tool.claim_started") == 1 and "tool.lease_expired" not in types
        meaning = await api.repo.verify_meaning(session)
        assert meaning.ok, [p.describe() for p in meaning.problems]


async def verdict_post(base: str, key: str, event: dict[str, Any]) -> int | None:
    """A post event through the command hook: its exit status."""
    proc = await hook(base, key, event)
    await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode


async def test_a_report_is_filed_on_the_call_it_names_only(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """A PostToolUse of an id parkgate never saw, with the same tool and input
    as a claimed call, is not that call's outcome; the claimed call's own
    report is then recorded, not refused."""
    async with stack(dev_temporal, sqlite_repo, tmp_path, claude_code_wait_seconds=60) \
            as (api, base), AsyncParkgateClient(base, api.human_key) as human:
        session, tid = str(uuid.uuid4()), f"toolu_{uuid.uuid4().hex[:12]}"
        first = pre(api, session, tid, "same\n")
        running = await hook(base, api.key, first)
        await parked(human, session, tid)
        await human.decide(session, tid, "allow")
        assert (await verdict(running)).startswith("allow")  # Claude Code runs it now
        stranger = f"toolu_{uuid.uuid4().hex[:12]}"
        await verdict_post(base, api.key, post(first, stranger, "not this call's output"))
        assert (await human.get_call(session, tid)).status.value == "claimed"
        assert await api.repo.get_event(
            make_event_id(session, tid, "tool.outcome_reported")) is None
        assert await verdict_post(base, api.key, post(first, tid, "the real output")) == 0
        row = await human.get_call(session, tid)
        assert row.status.value == "succeeded" and row.result is not None
        assert row.result.text == "the real output"
