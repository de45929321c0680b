"""The MCP endpoint's route, with the MCP SDK loaded on its first request.

`parkgate.api.agents.mcp_gateway` (the SDK's `Server` and session manager) costs
~16 MB of imports that an API whose agents never speak MCP does not need
(docs/PERFORMANCE.md, "Scale on one machine"). The route is always mounted,
so the app's routes and OpenAPI document do not change; the gateway is built
by the first request to it. The SDK's session manager must run in a task
that lives as long as the app (its task group is entered and left in one
task), so the app lifespan starts a small runner task that builds the
gateway and runs its manager once a request asks for it, and stops it when
the lifespan ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from fastapi import FastAPI

    from parkgate.api.agents.mcp_gateway import McpGateway
    from parkgate.api.shared.deps import ApiDeps
    from parkgate.api.shared.service import CallService
    from parkgate.settings import Settings

MCP_PATH = "/v1/sessions/{session_id}/mcp"


class LazyMcp:
    """The ASGI endpoint: builds the gateway on first use, then hands every request to it."""

    def __init__(self, settings: Settings, deps: ApiDeps, calls: CallService) -> None:
        self._args = (settings, deps, calls)
        self.gateway: McpGateway | None = None
        #: Whether the app lifespan is on (the gateway's manager can then run).
        self.running = False
        self._wanted: asyncio.Event | None = None
        self._ready: asyncio.Future[None] | None = None

    def _build(self) -> McpGateway:
        if self.gateway is None:
            from parkgate.api.agents.mcp_gateway import McpGateway

            self.gateway = McpGateway(*self._args)
        return self.gateway

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """For the app lifespan: a runner that starts the gateway's manager when asked."""
        wanted, stop = asyncio.Event(), asyncio.Event()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def runner() -> None:
            await wanted.wait()
            try:
                # The manager runs in this one task, entered and left here.
                async with self._build().run():
                    ready.set_result(None)
                    await stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        task = asyncio.create_task(runner(), name="parkgate-mcp")
        self._wanted, self._ready, self.running = wanted, ready, True
        try:
            yield
        finally:
            self.running = False
            self._wanted = self._ready = None
            stop.set()
            if not wanted.is_set():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gateway = self._build()
        if self.running and self._wanted is not None and self._ready is not None:
            self._wanted.set()
            await asyncio.shield(self._ready)
        # Without the lifespan the gateway answers 503 itself (after authenticating).
        await gateway(scope, receive, send)


def install(app: FastAPI, settings: Settings, deps: ApiDeps, calls: CallService) -> LazyMcp:
    """Mount the endpoint and the runner of the SDK's session manager in the app lifespan."""
    endpoint = LazyMcp(settings, deps, calls)
    app.router.routes.append(Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"]))
    previous: Callable[[Any], AbstractAsyncContextManager[Any]] = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[Any]:
        async with endpoint.run(), previous(app_) as state:
            yield state

    app.router.lifespan_context = lifespan
    app.state.mcp = endpoint
    return endpoint
