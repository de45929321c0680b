"""`python -m bench.floor_worker`: a worker process that runs only the floor workflow.

The throughput phase compares parkgate's worker processes with the floor's
(an empty workflow) at the same process count; this is the floor's process,
configured like `python -m parkgate.runtime.worker` (PARKGATE_* variables: address,
task queue, data dir for the converter's key), with parkgate's sandbox.
"""

from __future__ import annotations

import asyncio
import signal

from temporalio.worker import Worker

from bench.floor import FloorWorkflow
from parkgate.durable.connect import connect
from parkgate.settings import get_settings


async def serve() -> None:
    settings = get_settings()
    client = await connect(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Worker(client, task_queue=settings.temporal_task_queue,
                      workflows=[FloorWorkflow]):  # sandbox: the client's ParkgatePlugin
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(serve())
