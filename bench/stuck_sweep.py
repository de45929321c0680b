"""What one task-healer sweep costs with many parked calls: `python -m bench.stuck_sweep`.

Parks `-n` write_file calls (WRITE prompts) on a dev server, then times
`TaskHealer.sweep()` both ways: only the calls Temporal flags with
TemporalReportedProblems (the default: one visibility query) and every
running call of the task queue (a describe per call). Run it once and
briefly: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from temporalio.client import Client

from parkgate.activities.deps import Deps
from parkgate.calls.records import HistoryStore
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.plugin import ParkgatePlugin
from parkgate.durable.stuck import TaskHealer
from parkgate.models import Session, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.worker import build_pipeline, build_worker
from parkgate.settings import Settings
from parkgate.store import Repository
from parkgate.store.migrate import upgrade_async


async def park(dispatcher: DurableDispatcher, session: Session, n: int, client: Client) -> None:
    for i in range(n):
        call = ToolUseBlock(id=f"w{i}", name="write_file", input={"path": f"w{i}", "content": "x"})
        await dispatcher.start(call, session)
    query = "WorkflowType = 'parkgate.ToolCall' AND ExecutionStatus = 'Running'"
    while len([w async for w in client.list_workflows(query)]) < n:
        await asyncio.sleep(0.2)


async def timed(healer: TaskHealer, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ended = await healer.sweep()
        samples.append((time.perf_counter() - t0) * 1000)
        assert ended == []
    return samples


async def main(n: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        workspace = tmp / "ws"
        workspace.mkdir()
        url = f"sqlite+aiosqlite:///{tmp / 'parkgate.db'}"
        await upgrade_async(url)
        store = await Repository.connect(url)
        settings = Settings(
            data_dir=tmp, link_secret="bench", workspace_roots=[workspace],
            temporal_task_queue="bench-stuck",
        )
        deps = Deps(settings=settings, pipeline=build_pipeline(settings),
                    store=cast(HistoryStore, store))
        rows: list[tuple[str, list[float]]] = []
        async with DevServer(tmp / "temporal") as server:
            client = await Client.connect(server.address, plugins=[ParkgatePlugin(settings)])
            dispatcher = DurableDispatcher(client, settings, eager_start=True)
            session = Session(session_id="bench", turn_id="t", workspace_path=str(workspace))
            async with build_worker(client, settings, deps):
                await park(dispatcher, session, n, client)
                for flagged in (True, False):
                    healer = TaskHealer(
                        client, settings.model_copy(update={"stuck_task_flagged_only": flagged}),
                        cast(Any, store),
                    )
                    name = "flagged only (TemporalReportedProblems)" if flagged else \
                        "every running call (describe each)"
                    rows.append((name, await timed(healer, repeats)))
        await store.close()
    print(f"one sweep with {n} parked calls, {repeats} sweeps each (dev server)")
    print(f"{'sweep':<44}{'p50 ms':>9}{'max ms':>9}")
    for name, samples in rows:
        print(f"{name:<44}{statistics.median(samples):>9.1f}{max(samples):>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200, help="parked calls")
    parser.add_argument("--repeats", type=int, default=5, help="sweeps per mode")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.repeats))
