"""Twelve mixed decisions at once on each parked call, on a worker that caches no
workflow (every workflow task replays the whole history, as after a restart):
every call ends, one decision wins, no workflow task fails, and every history
replays.

Before PATCH_REVALIDATE_ACTIVITY an approver's edits were re-scoped by a local
activity inside the decide update: its result could land in the workflow task
after the one that recorded its marker, with a rival decision accepted in
between, and the replaying worker then produced the commands in another order
("Nondeterminism error" / "UpdateMachine ... invalid during event
WorkflowExecutionUpdateAccepted"): the call wedged with its decision accepted
(docs/FAULTS.md, finding 13; one call in four here, two in four on a loaded
machine).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import RPCTimeoutOrCancelledError

from parkgate.models import ToolUseBlock
from parkgate.runtime.devserver import DevServer
from tests.fixtures.temporal import dev_client, durable_rig, replayer

pytestmark = [pytest.mark.devserver, pytest.mark.slow, pytest.mark.timeout(420)]

DECIDERS = 12
MIX = ("allow_with_edits", "deny", "allow")


async def test_concurrent_decisions_on_a_cold_worker_replay(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, max_cached_workflows=0) as rig:
        session = rig.session()
        handles = []
        for i in range(3):
            call = ToolUseBlock(id=f"tu_cold_{i}", name="write_file",
                                input={"path": f"cold{i}.txt", "content": "original"})
            handles.append((call.id, await rig.dispatcher.start(call, session)))

        # All three parked before any decision: with no cache every status
        # query is a whole replay, and a storm's queries would slow the other
        # calls' parking on a loaded machine (one took over 30 s in a full run).
        requests = {tu: await rig.wait_parked(session.session_id, tu, timeout=120)
                    for tu, _ in handles}

        async def storm(tool_use_id: str) -> list[Any]:
            request_id = requests[tool_use_id]

            async def one(j: int) -> Any:
                decision = MIX[j % len(MIX)]
                edits = ({"edited_input": {"path": f"{tool_use_id}.txt", "content": f"e{j}"}}
                         if decision == "allow_with_edits" else {})
                deadline = asyncio.get_running_loop().time() + 120
                while True:
                    try:
                        return await rig.dispatcher.decide(request_id, decision,
                                                           decided_by=f"d{j}", **edits)
                    except RPCTimeoutOrCancelledError:
                        # No worker answered in time (each query is a whole
                        # replay here): the API answers 503, a person retries.
                        if asyncio.get_running_loop().time() > deadline:
                            raise
                        await asyncio.sleep(0.2)

            return await asyncio.gather(*(one(j) for j in range(DECIDERS)))

        answers = await asyncio.gather(*(storm(tu) for tu, _ in handles))
        for (tu, handle), results in zip(handles, answers, strict=True):
            winners = [r for r in results if r.accepted]
            assert len(winners) == 1, (tu, [r.message for r in results])
            outcome = await asyncio.wait_for(handle.result(), 60)
            assert outcome.decision is not None
            assert outcome.decision.decided_by == winners[0].winner.decided_by
            history = await handle.fetch_history()
            failed = [e.event_id for e in history.events
                      if e.HasField("workflow_task_failed_event_attributes")]
            assert failed == [], (tu, failed)
            await replayer().replay_workflow(history)
