"""A parkgate worker as a real subprocess, configured only by PARKGATE_* variables.

Restart tests, the fault suite and the bench kill and restart workers; they all
spawn them here (`python -m parkgate.runtime.worker`, or another argv that runs
the same recipe, such as `parkgate worker`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from parkgate.runtime.process import ManagedProcess
from parkgate.settings import Settings

#: The worker's entry point (the one recipe, parkgate.runtime.worker.main).
WORKER_MODULE = "parkgate.runtime.worker"


def settings_env(
    settings: Settings | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment without inherited PARKGATE_* values, plus
    `settings` as PARKGATE_* variables and `extra` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    if settings is not None:
        env.update(settings.to_env())
    env.update(extra or {})
    return env


class WorkerProcess(ManagedProcess):
    """One worker subprocess: start, SIGTERM (`stop`), SIGKILL (`kill`), `wait_ready`."""

    def __init__(
        self,
        settings: Settings | None,
        log_path: Path,
        *,
        module: str = WORKER_MODULE,
        argv: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            name or log_path.stem,
            list(argv) if argv is not None else [sys.executable, "-m", module],
            log_path=log_path,
            env=env if env is not None else settings_env(settings),
            cwd=cwd,
        )
        self.settings = settings
        self.module = module

    def start(self) -> WorkerProcess:
        if self.settings is not None:
            self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        super().start()
        return self

    async def wait_ready(
        self, client: Client, task_queue: str | None = None, *, timeout: float = 60.0
    ) -> None:
        """Wait until this process polls `task_queue` (default: its settings' queue)
        for workflow or activity tasks; RuntimeError with its log if it exits."""
        queue = task_queue or (self.settings.temporal_task_queue if self.settings else None)
        if queue is None:
            raise ValueError("wait_ready needs a task queue")
        deadline = time.monotonic() + timeout
        while True:
            self.assert_alive()
            if await self.polling(client, queue):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not polling {queue!r} after {timeout:.0f}s")
            await asyncio.sleep(0.2)

    async def polling(self, client: Client, queue: str) -> bool:
        """Whether this process (its pid in the poller identity) has polled `queue`
        for workflow or activity tasks: started, not merely spawned."""
        mine = f"{self.pid}@"
        kinds = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
        for kind in kinds:
            resp = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace, task_queue=TaskQueue(name=queue),
                    task_queue_type=kind,
                )
            )
            if any(p.identity.startswith(mine) for p in resp.pollers):
                return True
        return False
