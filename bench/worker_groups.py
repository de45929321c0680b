"""What workspace-affine routing costs: `python -m bench.worker_groups [-n N]`.

Serial p50/p90 of auto-approved read_file and write_file calls on one dev
server, for a session without a worker group (classify and the read are local
activities on the main queue) and for a session with one (classify, and the
read inside it, become a regular activity on `<queue>.<group>`; the write's
execute moves there too). Both workers run in this process (production recipe,
`parkgate.runtime.worker.serving`), with a SQLite history store. Run it once and
briefly: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from bench.durable_latency import measure
from parkgate.activities.deps import Deps
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.plugin import ParkgatePlugin
from parkgate.models import Session, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.worker import build_pipeline, serving
from parkgate.settings import Settings
from parkgate.store import Repository
from parkgate.store.migrate import upgrade_async


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
            worker_groups={"host": []},
        )
        host = settings.model_copy(update={"serve_main_queue": False, "serve_groups": ["host"]})
        deps = Deps(settings=settings, pipeline=build_pipeline(settings), store=store)  # type: ignore[arg-type]
        host_deps = Deps(settings=host, pipeline=build_pipeline(host), store=store)  # type: ignore[arg-type]
        async with DevServer(tmp / "temporal") as server:
            client = await Client.connect(server.address,
                                          plugins=[ParkgatePlugin(settings, blobs=store)])
            dispatcher = DurableDispatcher(client, settings, eager_start=True)
            plain = Session(session_id="plain", turn_id="t", workspace_path=str(workspace))
            grouped = plain.model_copy(update={"session_id": "grouped", "worker_group": "host"})
            run = uuid.uuid4().hex[:6]

            def caller(session: Session, name: str) -> Callable[[int], Awaitable[object]]:
                async def call(i: int) -> object:
                    args = ({"path": "README.md"} if name == "read_file"
                            else {"path": f"{session.session_id}-{i}.txt", "content": "x"})
                    block = ToolUseBlock(id=f"{run}-{name}-{i}", name=name, input=args)
                    result = await dispatcher.dispatch(block, session)
                    assert not result.is_error, result.text
                    return result
                return call

            async with serving(client, settings, deps), serving(client, host, host_deps):
                rows = [
                    (f"{name}, {label}", await measure(n, caller(session, name)))
                    for name in ("read_file", "write_file")
                    for label, session in (("no group", plain), ("worker group", grouped))
                ]
        await store.close()
    print(f"serial latency over {n} calls each (dev server, SQLite history, eager start)")
    print(f"{'path':<34}{'p50 ms':>9}{'p90 ms':>9}")
    for name, samples in rows:
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:<34}{statistics.median(samples):>9.1f}{p90:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=30, help="calls per path")
    asyncio.run(main(parser.parse_args().n))
