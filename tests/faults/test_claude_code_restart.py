"""Claude Code's parked call survives parkgate restarting under the hook.

The real CLI (offline, scripted model) asks to write a file; the call parks
and the HTTP hook is held. The API is SIGKILLed and restarted: the hook fails,
and the installed hooks fail closed, so the write is blocked, not run. The
approver then approves the still-parked call; the model calls again with the
same input (a fresh tool_use_id), which attaches to the released call: the
file is written once and the call ends succeeded.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.claude_code.conftest import CLI, run_claude
from tests.claude_code.fake_anthropic import FakeAnthropic, TextStep, ToolStep
from tests.faults.conftest import StackFactory
from tests.faults.harness.apiclient import AgentClient
from tests.fixtures.required import unavailable

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_parked_claude_code_call_survives_an_api_restart(make_stack: StackFactory) -> None:
    if CLI is None:
        unavailable("claude-agent-sdk (the bundled Claude Code CLI) is not installed")
    stack = await make_stack(workers=1, extra_env={"PARKGATE_CLAUDE_CODE_WAIT_SECONDS": "60"})
    client = AgentClient(stack.base_url, stack.api_key or "", human_key=stack.human_key)
    client.errors.fault_active = True
    workspace = stack.untrusted
    target = workspace / "survives.txt"
    args = {"file_path": str(target), "content": "written once\n"}
    first = ToolStep("Write", args)
    again = ToolStep("Write", dict(args), hold=asyncio.Event())
    fake = FakeAnthropic([first, again, TextStep("done")])
    sid = str(uuid.uuid4())
    home = stack.root / "home"
    home.mkdir()
    async with fake.running():
        run = asyncio.create_task(run_claude(
            fake, sid, url=stack.base_url, key=stack.api_key or "", workspace=workspace,
            home=home, wait_seconds=60))
        deadline = time.monotonic() + 90
        while (await client.request("GET", f"/v1/sessions/{sid}/tool-calls/{first.id}",
                                    deadline=deadline)).status_code == 404:
            assert time.monotonic() < deadline, "the hook never submitted the call"
            await asyncio.sleep(0.2)
        parked = await client.wait_status(sid, first.id, {"parked"}, timeout=90)
        await stack.restart_api(kill=True)
        deadline = time.monotonic() + 90
        while fake.result_for(first.id) is None:  # the hook failed: blocked
            assert time.monotonic() < deadline, "the blocked call never reached the model"
            await asyncio.sleep(0.2)
        assert not target.exists()
        # Read it again as stored: parked was maybe answered from the workflow
        # before its row was written, with no turn id yet (the decision URL needs it).
        while not parked.get("turn_id"):
            assert time.monotonic() < deadline, f"no turn id: {parked}"
            parked = await client.wait_status(sid, first.id, {"parked"}, timeout=90)
            await asyncio.sleep(0.2)
        rid = await client.request_id(sid, parked)
        r = await client.decide(sid, parked["turn_id"], rid, "allow")
        assert r.status_code == 200, r.text
        again.hold.set()  # type: ignore[union-attr]
        done = await run
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "written once\n"
    final = await client.wait_status(sid, first.id, {"succeeded"}, timeout=60)
    assert final["status"] == "succeeded"
    types = [e["type"] for e in await client.events(sid, first.id)]
    assert types.count("tool.released") == 1 and types.count("tool.claimed") == 1
    await client.aclose()
