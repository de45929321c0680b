"""A run whose store writes wait on a busy store ends as it ran (dev server,
real worker, real lock contention on SQLite and PostgreSQL).

The at-most-once execute activity is heartbeated; its final write (the final
event with the full output) once ran after the heartbeats had stopped. Held
up by another writer for longer than the heartbeat timeout (45 large shell
results in one batch, under load), the server timed the run out, and the
call's end was a race between the workflow's "worker lost, outcome unknown"
(`failed`) and the activity's late write of its `succeeded`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from temporalio.api.enums.v1 import EventType

from parkgate.calls.records import CallStatus
from parkgate.durable.payloads import call_workflow_id
from parkgate.models import ToolUseBlock
from parkgate.runtime.devserver import DevServer
from parkgate.store.repository import Repository
from tests.fixtures.temporal import AUTO_ALL, dev_client, durable_rig
from tests.workflows.test_restarts import wait_file

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]

#: The fixtures' heartbeat timeout (tests/fixtures/temporal.py), said here.
HEARTBEAT_TIMEOUT = 5.0


@asynccontextmanager
async def store_write_lock(repo: Repository) -> AsyncIterator[None]:
    """Hold the store's write lock from another connection, as a busy writer does."""
    if repo.dialect == "postgresql":
        async with repo.engine.connect() as conn, conn.begin():
            await conn.execute(text("LOCK TABLE tool_events IN EXCLUSIVE MODE"))
            yield
        return
    database = repo.engine.url.database
    assert database
    conn = sqlite3.connect(database, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_outcome_waiting_on_a_busy_store_is_not_worker_lost(
    dev_server: DevServer, repo: Repository, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    async with durable_rig(client, repo, tmp_path, policy=AUTO_ALL,
                           execute_heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT) as rig:
        session = rig.session()
        # The command ends only once the lock is held: its final write then
        # waits for twice the heartbeat timeout.
        command = "echo ran > ran.txt && until [ -e go ]; do sleep 0.05; done && echo done"
        call = ToolUseBlock(id="tu_busy", name="shell", input={"command": command})
        run = asyncio.create_task(rig.dispatcher.dispatch_outcome(call, session))
        await wait_file(rig.workspace / "ran.txt")
        async with store_write_lock(repo):
            (rig.workspace / "go").touch()
            await asyncio.sleep(2 * HEARTBEAT_TIMEOUT)
        outcome = await asyncio.wait_for(run, 60)
    history = await client.get_workflow_handle(
        call_workflow_id(session.session_id, "tu_busy")).fetch_history()
    timed_out = [e for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]
    # Timed out, the call's end was a race between the workflow's "worker
    # lost" and the activity's late write of what ran.
    assert not timed_out, timed_out
    assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
    assert "done" in outcome.result.text
    row = await repo.get_call(session.session_id, "tu_busy")
    assert row is not None and row.status == CallStatus.SUCCEEDED
