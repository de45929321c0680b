"""Serial p50 latency of durable calls on one dev server: `python -m bench.durable_latency`.

Measures, with the worker in the same process as the client (eager start):
- an empty workflow (the floor of this server/machine: `bench.floor`'s, whose
  module the sandbox re-executes for each run, so it is kept free of imports),
- an auto-approved read_file call (classify + execute_local + record: local activities),
- an auto-approved write_file call (policy auto-approves writes; the at-most-once
  regular execute activity),
all through the production worker recipe and a SQLite history store.
Run it once and briefly: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from bench.floor import Empty, FloorWorkflow
from parkgate import workflows
from parkgate.activities.deps import Deps
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.plugin import ParkgatePlugin
from parkgate.models import Session, ToolUseBlock
from parkgate.pipeline import Pipeline
from parkgate.registry import ToolRegistry
from parkgate.rules.policy import ConfirmationPolicy
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.worker import build_worker
from parkgate.settings import Settings
from parkgate.store import Repository
from parkgate.store.migrate import upgrade_async
from parkgate.tools import builtin_tools


async def measure(n: int, fn: Callable[[int], Awaitable[object]]) -> list[float]:
    await fn(-1)  # warm up
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await fn(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        workspace = tmp / "ws"
        workspace.mkdir()
        (workspace / "README.md").write_text("# bench\n" * 20)
        url = f"sqlite+aiosqlite:///{tmp / 'parkgate.db'}"
        await upgrade_async(url)
        store = await Repository.connect(url)
        settings = Settings(
            data_dir=tmp,
            link_secret="bench",
            workspace_roots=[workspace],
            temporal_task_queue="bench",
            tool_confirmation={"default": {"WRITE": "auto"}},
        )
        registry = ToolRegistry()
        for factory in builtin_tools():
            registry.register(factory)
        pipeline = Pipeline(registry, ConfirmationPolicy.from_mapping(settings.tool_confirmation))
        deps = Deps(settings=settings, pipeline=pipeline, store=store)  # type: ignore[arg-type]
        async with DevServer(tmp / "temporal") as server:
            client = await Client.connect(server.address,
                                          plugins=[ParkgatePlugin(settings, blobs=store)])
            worker = build_worker(
                client, settings, deps, workflows=[*workflows.ALL, FloorWorkflow]
            )
            dispatcher = DurableDispatcher(client, settings, eager_start=True)
            session = Session(session_id="bench", turn_id="t", workspace_path=str(workspace))
            run = uuid.uuid4().hex[:6]

            async def empty(i: int) -> object:
                return await client.execute_workflow(
                    FloorWorkflow.run,
                    Empty(),
                    id=f"bench/{run}/empty/{i}",
                    task_queue=settings.temporal_task_queue,
                    request_eager_start=True,
                )

            async def read(i: int) -> object:
                call = ToolUseBlock(id=f"{run}-r{i}", name="read_file", input={"path": "README.md"})
                result = await dispatcher.dispatch(call, session)
                assert not result.is_error, result.text
                return result

            async def write(i: int) -> object:
                call = ToolUseBlock(
                    id=f"{run}-w{i}", name="write_file", input={"path": f"w{i}.txt", "content": "x"}
                )
                result = await dispatcher.dispatch(call, session)
                assert not result.is_error, result.text
                return result

            async with worker:
                rows = [
                    ("empty workflow (eager)", await measure(n, empty)),
                    ("read_file, auto (local activities)", await measure(n, read)),
                    ("write_file, auto (regular execute activity)", await measure(n, write)),
                ]
        await store.close()
    print(f"serial latency over {n} calls each (dev server, SQLite history, eager start)")
    print(f"{'path':<46}{'p50 ms':>9}{'p90 ms':>9}")
    for name, samples in rows:
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:<46}{statistics.median(samples):>9.1f}{p90:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=30, help="calls per path")
    asyncio.run(main(parser.parse_args().n))
