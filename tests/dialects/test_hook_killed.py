"""Gemini CLI's and opencode's hooks killed before their call ran: the new
paths held to test_hook_killed's kill -9 tests for Claude Code.

Gemini: the real command hook (`parkgate hook gemini`, a process per event)
is SIGKILLed while its call is parked, or within 0.2 s of its start (its
event may or may not have reached parkgate). opencode: its real plugin
(`parkgate opencode install`'s file, run by node with opencode's hook
arguments: the same fetch to /v1/hooks/opencode opencode's own process
makes) is SIGKILLed the same way, as opencode dying would kill it. Then one
approval: the re-sent event (Gemini: the same tool and input, no id;
opencode: the same call id, or the model's retry under a fresh one) is
allowed and runs the call once; a second copy racing it is not allowed; one
approval request, one started claim, the post-tool event is the outcome, and
the session's chain and meaning verify. Gemini's retry after an early kill
is sent once the killed event has parked or cannot have (as its model would
call again): with no call id, two identical events in flight at once are two
calls (test_hook_parity says so too). Real API on a socket, worker, Temporal
dev server, Postgres.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from parkgate.dialects.opencode_setup import plugin_text
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters
from tests.api.rig import ApiRig, api_rig, free_socket, live_server
from tests.claude_code.conftest import PARKGATE

#: The hold: long enough that a killed hook's request still waits at the approval.
WAIT_SECONDS = 60
#: As in Claude Code's test: a retry that waited for the reservation to lapse fails.
RESERVE_SECONDS = 600.0
ALLOWED_WITHIN = 30.0
COMMAND = "make deploy"

#: Runs the installed plugin's hook with opencode's arguments (argv: the hook
#: name, then the JSON of [input, output]); prints what opencode would see.
DRIVER = """
import { ParkgateGate } from "./parkgate.mjs";
const [name, spec] = process.argv.slice(2);
const [input, output] = JSON.parse(spec);
const hooks = await ParkgateGate({ directory: process.env.OPENCODE_DIR });
try {
  await hooks[name](input, output);
  console.log(JSON.stringify({ allowed: true, args: output.args ?? null }));
} catch (err) {
  console.log(JSON.stringify({ allowed: false, error: String(err.message) }));
}
"""


@asynccontextmanager
async def served(client: Client, repo: Repository, tmp_path: Path
                 ) -> AsyncIterator[tuple[ApiRig, str]]:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base, gemini_wait_seconds=WAIT_SECONDS,
                       opencode_wait_seconds=WAIT_SECONDS,
                       client_reserve_seconds=RESERVE_SECONDS) as api, \
            live_server(api.app, sock):
        plugin = tmp_path / "plugin"
        plugin.mkdir()
        (plugin / "parkgate.mjs").write_text(plugin_text(base, WAIT_SECONDS))
        (plugin / "driver.mjs").write_text(DRIVER)
        yield api, base


class Agent:
    """One agent's hook as its real process: start it, read what the agent sees."""

    def __init__(self, name: str, api: ApiRig, base: str, sid: str, plugin: Path) -> None:
        self.name, self.api, self.base, self.sid, self.plugin = name, api, base, sid, plugin

    def before(self, call_id: str | None = None) -> dict[str, Any]:
        if self.name == "gemini":
            return {"hook_event_name": "BeforeTool", "session_id": self.sid,
                    "cwd": str(self.api.workspace), "tool_name": "run_shell_command",
                    "tool_input": {"command": COMMAND}, "transcript_path": "",
                    "timestamp": "2026-01-01T00:00:00Z"}
        return {"input": {"sessionID": self.sid, "callID": call_id, "tool": "bash"},
                "output": {"args": {"command": COMMAND, "description": "deploy"}}}

    async def start(self, event: dict[str, Any], after: str | None = None
                    ) -> asyncio.subprocess.Process:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
        env.update(PARKGATE_API_KEY=self.api.key, PARKGATE_DATA_DIR=str(self.plugin / "home"),
                   OPENCODE_DIR=str(self.api.workspace))
        if self.name == "gemini":
            if after is not None:
                event = {**event, "hook_event_name": "AfterTool",
                         "tool_response": {"llmContent": after}}
            proc = await asyncio.create_subprocess_exec(
                str(PARKGATE), "hook", "gemini", "--url", self.base, "--timeout", "120",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(event).encode())
            await proc.stdin.drain()
            proc.stdin.close()
            return proc
        hook, spec = "tool.execute.before", [event["input"], event["output"]]
        if after is not None:  # opencode's after hook: the args on input, the run's output
            hook = "tool.execute.after"
            spec = [{**event["input"], "args": event["output"]["args"]},
                    {"title": COMMAND, "output": after, "metadata": {"exit": 0}}]
        return await asyncio.create_subprocess_exec(
            "node", "driver.mjs", hook, json.dumps(spec), cwd=self.plugin,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)

    async def verdict(self, proc: asyncio.subprocess.Process) -> str:
        """`allow`, or `deny: <reason>` as the agent reads it."""
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        if self.name == "gemini":
            if proc.returncode == 2:
                return f"deny: blocked: {err.decode()}"
            assert proc.returncode == 0, (proc.returncode, out, err)
            body = json.loads(out)
            return "allow" if body["decision"] == "allow" else f"deny: {body['reason']}"
        assert proc.returncode == 0, (proc.returncode, out, err)
        seen = json.loads(out)
        return "allow" if seen["allowed"] else f"deny: {seen['error']}"

    async def report(self, event: dict[str, Any], output: str) -> None:
        proc = await self.start(event, after=output)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, (proc.returncode, out, err)


async def one_parked(api: ApiRig, sid: str) -> str:
    """The session's one call, once parked (never a second call)."""
    for _ in range(1200):
        rows = await api.repo.list_calls(CallFilters(session_id=sid), limit=5)
        found = [r for r in rows.items if r.status.value == "parked"]
        if found:
            assert len(rows.items) == 1, [(r.tool_use_id, r.status) for r in rows.items]
            return found[0].tool_use_id
        await asyncio.sleep(0.05)
    raise AssertionError("no call parked")


async def settled(api: ApiRig, sid: str, within: float = 5.0) -> None:
    """Until the session has a parked call, or `within` s passed without one."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        rows = await api.repo.list_calls(CallFilters(session_id=sid), limit=5)
        if any(r.status.value == "parked" for r in rows.items):
            return
        await asyncio.sleep(0.05)


async def approve(api: ApiRig, sid: str, cid: str, turn: str) -> None:
    parked = await api.wait_parked(sid, cid)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/{turn}/confirmations/"
                            f"{parked['request_id']}", json={"decision": "allow"})
    assert r.status_code == 200, r.text


async def ran_once(api: ApiRig, agent: Agent, sid: str, cid: str, ran: dict[str, Any]) -> None:
    """The post-tool event is the call's outcome; one call, one approval, one
    started claim; the session's chain and meaning verify."""
    await agent.report(ran, "deployed")
    done = (await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}",
                               params={"wait": 20})).json()
    assert done["status"] == "succeeded", done
    assert "deployed" in json.dumps(done["result"]), done
    rows = await api.repo.list_calls(CallFilters(session_id=sid), limit=5)
    assert [r.tool_use_id for r in rows.items] == [cid]  # attached, never a second call
    types = [e.type for e in await api.repo.call_events(sid, cid)]
    assert types.count("tool.confirmation_requested") == 1, types  # one approval
    assert types.count("tool.claim_started") == 1, types
    assert types.count("tool.outcome_reported") == 1 and "tool.lease_expired" not in types
    chain = await api.repo.verify_chain(sid)
    assert chain.ok, chain.problems
    meaning = await api.repo.verify_meaning(sid)
    assert meaning.ok, [p.describe() for p in meaning.problems]


AGENTS = [("gemini", "no id"), ("opencode", "same id"), ("opencode", "fresh id")]


@pytest.mark.parametrize(("agent_name", "retry"), AGENTS)
async def test_a_hook_killed_while_parked_then_one_approval_runs_the_call_once(
    agent_name: str, retry: str, dev_temporal: Client, pg_repo: Repository, tmp_path: Path,
) -> None:
    """Killed while its call is parked (its request still held in the API);
    approved; the re-sent event, sent twice at once, is allowed once."""
    async with served(dev_temporal, pg_repo, tmp_path) as (api, base):
        sid = f"{agent_name[:2]}-{uuid.uuid4().hex[:8]}"
        agent = Agent(agent_name, api, base, sid, tmp_path / "plugin")
        first_id = f"call_{uuid.uuid4().hex[:10]}"
        dead = await agent.start(agent.before(first_id))
        cid = await one_parked(api, sid)
        await asyncio.sleep(0.3)  # its request waits inside the API
        os.kill(dead.pid, signal.SIGKILL)
        await dead.wait()
        await approve(api, sid, cid, agent_name)
        approved = asyncio.get_running_loop().time()
        again = agent.before(first_id if retry == "same id" else
                             f"call_{uuid.uuid4().hex[:10]}")
        copies = [agent.before(first_id if retry == "same id" else
                               f"call_{uuid.uuid4().hex[:10]}"), again]
        procs = [await agent.start(c) for c in copies]
        said = await asyncio.gather(*(agent.verdict(p) for p in procs))
        assert sorted(s == "allow" for s in said) == [False, True], said  # run once
        assert asyncio.get_running_loop().time() - approved < ALLOWED_WITHIN
        ran = copies[said.index("allow")]
        if agent_name == "gemini":
            assert cid.startswith("gemini-")
        else:
            assert cid == first_id
        await ran_once(api, agent, sid, cid, ran)


@pytest.mark.parametrize(("agent_name", "retry"), AGENTS)
async def test_a_hook_killed_before_the_park_then_one_approval_runs_the_call_once(
    agent_name: str, retry: str, dev_temporal: Client, pg_repo: Repository, tmp_path: Path,
) -> None:
    """Killed within 0.2 s of its start (its event may or may not have reached
    parkgate): the retry parks or attaches, one approval allows it, it runs once."""
    async with served(dev_temporal, pg_repo, tmp_path) as (api, base):
        sid = f"{agent_name[:2]}-{uuid.uuid4().hex[:8]}"
        agent = Agent(agent_name, api, base, sid, tmp_path / "plugin")
        first_id = f"call_{uuid.uuid4().hex[:10]}"
        dead = await agent.start(agent.before(first_id))
        await asyncio.sleep(0.15)
        os.kill(dead.pid, signal.SIGKILL)
        await dead.wait()
        if retry == "no id":
            # Gemini's model calls again after it saw the hook fail: by then the
            # dead event has parked its call or never will. (Sent at once, the
            # two would race as two calls: with no id, identical events in
            # flight together are not known to be one call.)
            await settled(api, sid)
        again = agent.before(first_id if retry == "same id" else
                             f"call_{uuid.uuid4().hex[:10]}")
        retrying = await agent.start(again)
        cid = await one_parked(api, sid)
        await approve(api, sid, cid, agent_name)
        approved = asyncio.get_running_loop().time()
        said = await agent.verdict(retrying)
        assert said == "allow", said
        assert asyncio.get_running_loop().time() - approved < ALLOWED_WITHIN
        await ran_once(api, agent, sid, cid, again)
