"""The one uvicorn server: `parkgate serve`/`parkgate api`, the bench and the test
rigs all serve their ASGI apps through `ApiServer`, built by `api_server(...)`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from typing import Any, Literal

import uvicorn

from parkgate.runtime.logredact import uvicorn_log_config


class StartupError(RuntimeError):
    """Something the operator must fix before the stack can start (one line);
    also what uvicorn's SystemExit on a failed start becomes."""


class ApiServer(uvicorn.Server):
    """uvicorn without its own signal handling: the caller owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Let long-polls answer with the current state before connections close."""
        calls = getattr(getattr(self.config.app, "state", None), "calls", None)
        if calls is not None:
            calls.draining.set()
        super().handle_exit(sig, frame)

    @property
    def port(self) -> int | None:
        """The port it listens on once started (bound sockets included)."""
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return None


def api_server(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    log_level: str = "warning",
    lifespan: Literal["auto", "on", "off"] = "on",
    access_log: bool = True,
    proxy_headers: bool = True,
    timeout_keep_alive: int = 5,
    timeout_graceful_shutdown: int = 10,
) -> ApiServer:
    """An ApiServer for `app` with parkgate's redacting log config."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=uvicorn_log_config(),
        log_level=log_level,
        access_log=access_log,
        lifespan=lifespan,
        proxy_headers=proxy_headers,
        timeout_keep_alive=timeout_keep_alive,
        timeout_graceful_shutdown=timeout_graceful_shutdown,
        # No route is a WebSocket (events are SSE, MCP is streamable HTTP): "auto"
        # would import the websockets library into every API process for nothing.
        ws="none",
    )
    return ApiServer(config)


async def serve_until(server: ApiServer, stop: asyncio.Event) -> None:
    """Run uvicorn until `stop` is set (or it fails), then let it finish in-flight requests."""
    task = asyncio.create_task(server.serve(), name="parkgate-api")
    stopper = asyncio.create_task(stop.wait(), name="parkgate-stop")
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # handle_exit (not just should_exit): sse-starlette hooks it to end open
        # event streams at once instead of holding shutdown for the grace period.
        server.handle_exit(signal.SIGTERM, None)
        stopper.cancel()
        try:
            await task
        except SystemExit as exc:  # uvicorn exits on a startup failure
            raise StartupError("the API server failed to start; see the log above") from exc
        finally:
            reset_sse_shutdown_flag()


@contextlib.asynccontextmanager
async def served(
    server: ApiServer, sock: socket.socket, *, stop_timeout: float = 15.0
) -> AsyncIterator[ApiServer]:
    """Serve on an already-bound socket (`ports.listening_socket`) for the block.

    Only this server stops at the end (should_exit, not the process-global SSE
    flag), so other servers in the same process keep streaming."""
    task = asyncio.create_task(server.serve(sockets=[sock]), name="parkgate-served")
    try:
        while not server.started:
            if task.done():
                try:
                    task.result()
                except SystemExit as exc:
                    raise StartupError("the server failed to start") from exc
                raise StartupError("the server stopped during startup")
            await asyncio.sleep(0.02)
        yield server
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, SystemExit):
            await asyncio.wait_for(task, stop_timeout)


def reset_sse_shutdown_flag() -> None:
    """sse-starlette's shutdown flag is process-global; clear it once the server is gone
    so a later server in the same process (tests) streams normally."""
    try:
        from sse_starlette.sse import AppStatus
    except ImportError:  # pragma: no cover - sse-starlette is a dependency
        return
    AppStatus.should_exit = False
