"""The HTTP app assembled over a store, a Temporal client and the tool registry.

The runtime serves it (`parkgate serve`, `parkgate api`) through this factory,
handed in by the CLI, so the runtime layer never imports the interfaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI
    from temporalio.client import Client

    from parkgate.registry import ToolRegistry
    from parkgate.settings import Settings
    from parkgate.store import Repository


def api_app(
    settings: Settings,
    repo: Repository,
    client: Client,
    registry: ToolRegistry,
    *,
    worker_in_process: bool = False,
) -> FastAPI:
    """The FastAPI app over the shared store, Temporal client and the workers' registry.

    `worker_in_process=True` (the embedded stack) starts calls with Temporal's
    eager workflow start: the first workflow task runs in this process
    without a round trip through the server's task queue.
    """
    from parkgate.api import ApiDeps, create_app
    from parkgate.durable.dispatcher import DurableDispatcher

    dispatcher = DurableDispatcher(
        client, settings, registry=registry, approvals=repo, eager_start=worker_in_process
    )
    return create_app(
        settings,
        ApiDeps(repo=repo, temporal=client, registry=registry, dispatcher=dispatcher),
    )
