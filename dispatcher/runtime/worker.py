"""The one worker recipe: `workflows.ALL` + `activities.build(deps)`.

Production (`python -m parkgate.runtime.worker`, `parkgate serve`) and every test
build their worker here, so registration cannot drift. Converter, sandbox and
failure types come with the client's ParkgatePlugin (parkgate.durable.plugin); a
client connected with only its client half (parkgate.durable.connect) gets the
full plugin over the same converter first (`worker_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from temporalio.client import Client
from temporalio.worker import Worker

from parkgate import activities, workflows
from parkgate.activities.deps import Deps
from parkgate.calls.records import HistoryStore
from parkgate.durable.plugin import ParkgatePlugin, plugin_of, with_plugin
from parkgate.runtime.tool_registry import build_registry, mcp_tools
from parkgate.settings import Settings, get_settings
from parkgate.workspaces.worker_groups import group_queue

if TYPE_CHECKING:
    from parkgate.durable.blobs import BlobStore
    from parkgate.pipeline import Pipeline
    from parkgate.registry import ToolFactory

__all__ = ["build_registry", "build_worker", "build_workers", "main", "serving", "worker_client",
           "working"]

log = logging.getLogger("parkgate.worker")


def worker_client(client: Client, settings: Settings) -> Client:
    """`client` carrying the full ParkgatePlugin, with the sandbox its worker's
    settings ask for: as it is when it already does (or has no parkgate plugin
    at all: `build_worker` adds one), else the same connection with the full
    plugin over its converter (a client-only connection, another sandbox choice)."""
    plugin = plugin_of(client)
    if plugin is None or (
        isinstance(plugin, ParkgatePlugin) and plugin.sandbox == settings.workflow_sandbox
    ):
        return client
    return with_plugin(
        client, ParkgatePlugin(converter=plugin.converter, sandbox=settings.workflow_sandbox)
    )


def build_worker(client: Client, settings: Settings, deps: Deps, **overrides: object) -> Worker:
    """A worker on settings.temporal_task_queue running every workflow and activity."""
    options: dict[str, object] = {
        "task_queue": settings.temporal_task_queue,
        "workflows": workflows.ALL,
        "activities": activities.build(deps),
        "max_cached_workflows": settings.max_cached_workflows,
        # Let a running tool finish (or clean up) before a graceful stop.
        "graceful_shutdown_timeout": timedelta(seconds=settings.cancel_grace_seconds),
    }
    if plugin_of(client) is None:
        # A client made without the plugin (a test's own converter): the worker
        # still gets parkgate's sandbox and failure types, over that converter.
        options["plugins"] = [ParkgatePlugin(converter=client.data_converter,
                                             sandbox=settings.workflow_sandbox)]
    else:
        # The worker's own settings say whether its workflows run in the sandbox.
        client = worker_client(client, settings)
    options.update(overrides)
    return Worker(client, **options)  # type: ignore[arg-type]


def build_workers(
    client: Client, settings: Settings, deps: Deps, **overrides: object
) -> list[Worker]:
    """Every worker this process runs: the main one (unless `serve_main_queue` is
    false) and one per served worker group, on `<task queue>.<group>`.

    A group worker runs activities only (the workflows stay on the main queue);
    it registers the same activity list, so registration cannot drift.
    """
    client = worker_client(client, settings)  # one full plugin for all of them
    workers: list[Worker] = []
    if settings.serve_main_queue:
        workers.append(build_worker(client, settings, deps, **overrides))
    base = str(overrides.get("task_queue", settings.temporal_task_queue))
    group_options = {k: v for k, v in overrides.items() if k not in {"task_queue", "workflows"}}
    for group in settings.serve_groups:
        workers.append(
            build_worker(
                client,
                settings,
                deps,
                **{**group_options, "task_queue": group_queue(base, group), "workflows": []},
            )
        )
    return workers


@contextlib.asynccontextmanager
async def serving(
    client: Client, settings: Settings, deps: Deps, **overrides: object
) -> AsyncIterator[list[Worker]]:
    """Run `build_workers(...)` for the duration of the block (graceful stop after)."""
    async with contextlib.AsyncExitStack() as stack:
        workers = build_workers(client, settings, deps, **overrides)
        for worker in workers:
            await stack.enter_async_context(worker)
        yield workers


@contextlib.asynccontextmanager
async def working(client: Client, settings: Settings, deps: Deps) -> AsyncIterator[None]:
    """A worker process's whole job for the duration of the block: its workers
    (`serving`) and the background passes over its store, the stuck-call sweep,
    the sweep for calls ended from outside and the open-call report (one recipe
    for `parkgate worker` and `serve`)."""
    from parkgate.durable.open_calls import reporting_open_calls
    from parkgate.durable.orphans import sweeping_orphans
    from parkgate.durable.stuck import healing

    async with serving(client, settings, deps), healing(client, settings, deps.store), \
            sweeping_orphans(client, settings, deps.store), \
            reporting_open_calls(settings, deps.store):
        yield


def build_pipeline(settings: Settings, *, extra_tools: Iterable[ToolFactory] = ()) -> Pipeline:
    """The pipeline from settings: built-in and composed tools, confirmation policy
    (YAML and Cedar), limits. A Cedar policy that does not check raises CedarError."""
    from parkgate.pipeline import Pipeline
    from parkgate.rules.policy import ConfirmationPolicy
    from parkgate.runtime.cedar_policy import load_cedar
    from parkgate.truncation import Limits

    registry = build_registry(extra_tools)
    policy = ConfirmationPolicy.from_mapping(settings.tool_confirmation).with_approvers(
        settings.approvers, settings.approver_groups
    )
    limits = Limits(
        default_timeout_seconds=settings.default_timeout_seconds,
        execute_timeout_seconds=settings.execute_timeout_seconds,
        cancel_grace_seconds=settings.cancel_grace_seconds,
        max_input_bytes=settings.max_input_bytes,
        tool_env_passthrough=tuple(settings.tool_env_passthrough),
        tool_sandbox=settings.tool_sandbox,
        tool_hidden_paths=tuple(str(p) for p in settings.hidden_tool_paths()),
        tool_sandbox_unshare=settings.tool_sandbox_unshare,
        tool_network_tools=tuple(settings.tool_network_tools),
        tool_network_classes=tuple(settings.tool_network_classes),
        tool_workspace_roots=tuple(str(p) for p in settings.tool_workspace_roots()),
        tool_readonly_paths=tuple(str(p) for p in settings.tool_readonly_paths),
        tool_user=settings.tool_user,
        tool_service_paths=tuple(str(p) for p in settings.service_tool_paths()),
        tool_exposed_paths={tool: tuple(str(p) for p in paths)
                            for tool, paths in settings.tool_exposed_paths.items()},
    )
    return Pipeline(registry, policy, limits=limits, cedar=load_cedar(settings, registry),
                    budgets=settings.budgets)


async def build_deps(settings: Settings, *, store: HistoryStore | None = None) -> Deps:
    """Real dependencies from settings; opens the store (schema checked) unless given."""
    if store is None:
        from parkgate.store import Repository

        repo = await Repository.connect(settings.effective_database_url, check_schema=True)
        # Repository.apply returns the number of new events; the protocol ignores it.
        store = cast(HistoryStore, repo)
    extra = await mcp_tools(settings)
    from parkgate.sandbox.launch import announce
    from parkgate.sandbox.tool_user import root_warning

    pipeline = build_pipeline(settings, extra_tools=extra)
    await announce(pipeline.limits)
    warning = root_warning(settings.tool_user)
    if warning is not None:
        log.warning("%s", warning)
    return Deps(settings=settings, pipeline=pipeline, store=store)


async def run_worker(settings: Settings, *, deps: Deps | None = None) -> None:
    """Run a worker until SIGTERM/SIGINT."""
    from parkgate.durable.connect import connect

    deps = deps or await build_deps(settings)
    # The worker's store also keeps the large payloads (parkgate.durable.blobs).
    blobs = cast("BlobStore", deps.store) if hasattr(deps.store, "put_blob") else None
    client = await connect(settings, blobs=blobs)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with working(client, settings, deps):
        await stop.wait()


def main() -> None:
    """`python -m parkgate.runtime.worker`: a worker configured by PARKGATE_* / server.yaml.

    A bad configuration, an unmigrated database or an unreachable Temporal
    server is one line on stderr and exit code 2.
    """
    from parkgate.runtime.malloc import limit_arenas

    limit_arenas()
    try:
        asyncio.run(run_worker(get_settings()))
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"parkgate worker: {message}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
