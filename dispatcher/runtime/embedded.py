"""Run parkgate's parts: the API and a worker, alone (production) or all together
with a Temporal dev server (`parkgate serve`, the embedded one-machine stack).

The embedded stack is one process tree: this process runs the worker and the
API (uvicorn) on one event loop; the `temporal` dev server is its child, with
its state in `<data_dir>/temporal.db` so parked calls survive a restart.
Shutdown order on Ctrl-C/SIGTERM: API, worker, Temporal, database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from parkgate.datadir import secure_data_dir
from parkgate.runtime.http_server import ApiServer, StartupError, api_server, serve_until
from parkgate.runtime.ports import pick_port, port_in_use
from parkgate.settings import Settings
from parkgate.workspaces.worker_groups import served_queues

if TYPE_CHECKING:
    from fastapi import FastAPI
    from temporalio.client import Client

    from parkgate.activities.deps import Deps
    from parkgate.durable.blobs import BlobStore
    from parkgate.registry import ToolRegistry
    from parkgate.store import Repository

log = logging.getLogger("parkgate.serve")

#: Preferred ports of the embedded Temporal server and its UI (any free port otherwise).
TEMPORAL_PORT = 7233
TEMPORAL_UI_PORT = 8233


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived while still starting: stop quietly."""


# ---------------------------------------------------------------------------
# small pieces shared by `serve`, `api` and `worker`
# ---------------------------------------------------------------------------


async def connect_temporal(
    settings: Settings,
    *,
    address: str | None = None,
    timeout: float = 60.0,
    stop: asyncio.Event | None = None,
    blobs: BlobStore | None = None,
) -> Client:
    """Connect, retrying while Temporal starts (compose starts everything at once).

    Setting `stop` while it waits raises Interrupted."""
    from parkgate.durable.connect import connect

    target = address or settings.temporal_address
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        try:
            return await connect(settings, address=address, blobs=blobs)
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise StartupError(
                    f"cannot reach Temporal at {target} (namespace "
                    f"{settings.temporal_namespace!r}) after {timeout:.0f}s: {_one_line(exc)}"
                ) from exc
            log.info("waiting for Temporal at %s: %s", target, exc)
            if stop is None:
                await asyncio.sleep(delay)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    raise Interrupted from exc
            delay = min(delay * 2, 2.0)


async def migrated_repository(settings: Settings, *, upgrade: bool = False) -> Repository:
    """The history store, upgraded first when asked; refuses a schema that does not match."""
    from parkgate.store import Repository, SchemaError
    from parkgate.store.migrate import upgrade_async
    from parkgate.store.urls import display_url

    url = settings.effective_database_url
    try:
        if upgrade:
            await upgrade_async(url)
        return await Repository.connect(url, check_schema=True)
    except SchemaError as exc:
        raise StartupError(_one_line(exc)) from exc
    except (OSError, ValueError) as exc:
        raise StartupError(
            f"cannot open the database {display_url(url)}: {_one_line(exc)}"
        ) from exc
    except Exception as exc:  # driver errors (asyncpg, sqlite) have no common base
        raise StartupError(
            f"cannot open the database {display_url(url)}: {_one_line(exc)}"
        ) from exc


async def worker_deps(settings: Settings, repo: Repository) -> Deps:
    """The worker's dependencies (the one recipe in parkgate.runtime.worker) over `repo`."""
    from parkgate.activities.deps import Deps
    from parkgate.calls.records import HistoryStore
    from parkgate.runtime.worker import build_deps

    deps = await build_deps(settings)
    own = cast(Any, deps.store)
    if own is not repo:  # build_deps opens its own engine; share ours instead
        await own.close()
    return Deps(settings=settings, pipeline=deps.pipeline, store=cast(HistoryStore, repo))


class AppFactory(Protocol):
    """Builds the HTTP app (`parkgate.api.assemble.api_app`): handed in by the
    interfaces layer so the runtime never imports the API it serves."""

    def __call__(
        self,
        settings: Settings,
        repo: Repository,
        client: Client,
        registry: ToolRegistry,
        *,
        worker_in_process: bool = False,
    ) -> FastAPI: ...


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Set `stop` on SIGINT/SIGTERM while inside the block (restores the old handlers)."""
    loop = asyncio.get_running_loop()
    sigs = (signal.SIGINT, signal.SIGTERM)
    for sig in sigs:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in sigs:
            loop.remove_signal_handler(sig)


def _one_line(exc: BaseException | str) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    # The Rust core's transport errors are long; keep the part a person acts on.
    for needle, short in (
        ("Connection refused", "connection refused"),
        ("dns error", "host not found"),
        ("timed out", "timed out"),
    ):
        if needle in text and "tonic::transport" in text:
            return short
    return text


# ---------------------------------------------------------------------------
# the runtime file: how `parkgate approve` finds a running `parkgate serve`
# ---------------------------------------------------------------------------

RUNTIME_FILE = "serve.json"


def write_runtime(data_dir: Path, banner: Banner) -> Path:
    """Record the running stack's addresses (removed again at shutdown)."""
    path = data_dir / RUNTIME_FILE
    info = {
        "pid": os.getpid(),
        "api_url": banner.api_url,
        "temporal_address": banner.temporal_address,
        "temporal_ui_url": banner.temporal_ui_url,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def read_runtime(data_dir: Path) -> dict[str, Any] | None:
    """The running `parkgate serve` of this data dir, if its process is alive."""
    import psutil

    path = data_dir / RUNTIME_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    try:
        cmdline = psutil.Process(int(info.get("pid", 0) or 0)).cmdline()
    except (psutil.Error, ValueError):
        return None  # gone: a stale file from a killed run
    if "serve" not in cmdline:
        return None  # the pid was reused by something else
    return info


LOCK_FILE = "serve.lock"


def lock_data_dir(data_dir: Path) -> int:
    """An exclusive lock on ``data_dir`` for this process's lifetime (the kernel
    drops it when the process dies, however it dies); StartupError naming the
    running owner when another `parkgate serve` holds it."""
    import fcntl

    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        other = read_runtime(data_dir) or {}
        raise StartupError(
            f"parkgate serve is already running on {data_dir} "
            f"(pid {other.get('pid', '?')}, {other.get('api_url', 'starting')})"
        ) from None
    return fd


def temporal_address_for(settings: Settings) -> str:
    """The configured Temporal address, or the embedded server of a running
    `parkgate serve` on this data dir when no address was configured."""
    if "temporal_address" not in settings.model_fields_set:
        info = read_runtime(settings.data_dir)
        if info and isinstance(info.get("temporal_address"), str):
            return str(info["temporal_address"])
    return settings.temporal_address


# ---------------------------------------------------------------------------
# production parts: `parkgate api`, `parkgate worker`
# ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _external(
    settings: Settings, stop: asyncio.Event, connect_timeout: float
) -> AsyncIterator[tuple[Repository, Client]]:
    """What `parkgate api` and `worker` stand on: the migrated store (closed on the
    way out) and Temporal (Interrupted once `stop` is set)."""
    repo = await migrated_repository(settings)
    try:
        yield repo, await connect_temporal(
            settings, timeout=connect_timeout, stop=stop, blobs=repo)
    finally:
        await repo.close()


async def run_api(
    settings: Settings,
    app_factory: AppFactory,
    *,
    log_level: str = "info",
    connect_timeout: float = 60,
    announce: Callable[[], None] | None = None,
) -> None:
    """`parkgate api`: the HTTP service against external Temporal + database.

    `announce` runs once SIGINT/SIGTERM are handled (a graceful stop from then on)."""
    if port_in_use(settings.api_host, settings.api_port):
        raise StartupError(f"port {settings.api_port} on {settings.api_host} is already in use")
    stop = asyncio.Event()
    with stop_on_signals(stop):
        if announce is not None:
            announce()
        try:
            async with _external(settings, stop, connect_timeout) as (repo, client):
                # The API needs the tools' definitions, not the worker's pipeline:
                # no policy, Cedar or sandbox loads here (they are the worker's).
                from parkgate.runtime.tool_registry import tool_registry

                registry = await tool_registry(settings)
                app = app_factory(settings, repo, client, registry)
                server = api_server(app, settings.api_host, settings.api_port, log_level=log_level)
                await serve_until(server, stop)
        except Interrupted:
            return


async def run_worker(
    settings: Settings,
    *,
    connect_timeout: float = 60,
    announce: Callable[[], None] | None = None,
) -> None:
    """`parkgate worker`: one worker against external Temporal + database.

    `announce` runs once SIGINT/SIGTERM are handled (a graceful stop from then on)."""
    stop = asyncio.Event()
    with stop_on_signals(stop):  # first: the imports below take a while
        if announce is not None:
            announce()
        from parkgate.runtime.worker import working

        try:
            async with _external(settings, stop, connect_timeout) as (repo, client):
                deps = await worker_deps(settings, repo)
                queues = served_queues(
                    settings.temporal_task_queue, settings.serve_groups,
                    main=settings.serve_main_queue,
                )
                log.info("worker polling task queues %s", ", ".join(map(repr, queues)))
                async with working(client, settings, deps):
                    await stop.wait()
        except Interrupted:
            return


# ---------------------------------------------------------------------------
# the embedded stack: `parkgate serve`
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Banner:
    """What `parkgate serve` prints once everything is up."""

    api_url: str
    audit_url: str
    temporal_ui_url: str
    temporal_address: str
    api_key: str
    api_key_name: str
    data_dir: Path
    database: str
    #: A human's key (approver + auditor): the audit pages and decisions. The
    #: agent's key (`api_key`) never decides its own calls.
    approver_key: str = ""


@dataclass
class EmbeddedStack:
    """Temporal dev server + worker + API in this process tree, state under data_dir."""

    settings: Settings
    app_factory: AppFactory
    port: int | None = None
    temporal_port: int = TEMPORAL_PORT
    ui_port: int = TEMPORAL_UI_PORT
    log_level: str = "warning"
    key_name: str | None = None
    #: Mint a new agent/approver key pair and revoke the kept one (`--new-keys`).
    new_keys: bool = False

    def effective_settings(self) -> Settings:
        """Settings with the API bound to 127.0.0.1:<port>; links follow the port
        unless public_base_url was set explicitly."""
        base = self.settings
        port = self.port or base.api_port
        update: dict[str, Any] = {"api_host": "127.0.0.1", "api_port": port}
        if "public_base_url" not in base.model_fields_set:
            update["public_base_url"] = f"http://127.0.0.1:{port}"
        return base.model_copy(update=update)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[tuple[Banner, ApiServer]]:
        """Start everything; yields the banner and the (not yet served) API server."""
        settings = self.effective_settings()
        host = settings.api_host
        settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = lock_data_dir(settings.data_dir)
        try:
            async with self._locked(settings, host, lock) as started:
                yield started
        finally:
            os.close(lock)

    @contextlib.asynccontextmanager
    async def _locked(
        self, settings: Settings, host: str, lock: int
    ) -> AsyncIterator[tuple[Banner, ApiServer]]:
        """The start-up once this process holds the data directory's lock: whatever
        a previous owner left (serve.json, a dev server) is stale and goes first."""
        from parkgate.runtime.devserver import DevServer, DevServerError, stop_leftovers
        from parkgate.runtime.serve_keys import start_keys
        from parkgate.runtime.worker import working
        from parkgate.store import ApiKeyNameTakenError
        from parkgate.store.urls import display_url

        (settings.data_dir / RUNTIME_FILE).unlink(missing_ok=True)
        leftovers = await asyncio.to_thread(stop_leftovers, settings.data_dir / "temporal.db")
        if leftovers:
            log.warning("stopped a leftover temporal dev server on %s (pid %s)",
                        settings.data_dir, ", ".join(map(str, leftovers)))
        if port_in_use(host, settings.api_port):
            raise StartupError(f"port {settings.api_port} on {host} is already in use (use --port)")
        secure_data_dir(settings.data_dir)
        settings.signing_secret()  # generate and keep it before anything signs a link
        repo = await migrated_repository(settings, upgrade=True)
        dev = DevServer(
            data_dir=settings.data_dir,
            port=pick_port(host, self.temporal_port),
            ui_port=pick_port(host, self.ui_port),
            headless=False,
            namespace=settings.temporal_namespace,
            die_with_parent=True,
        )
        try:
            try:
                await dev.start()
            except DevServerError as exc:
                raise StartupError(_one_line(exc)) from exc
            # The local dev server: plain gRPC, no Cloud credentials.
            settings = settings.model_copy(
                update={
                    "temporal_address": dev.address,
                    "temporal_tls": False,
                    "temporal_api_key": None,
                    "temporal_tls_cert_path": None,
                    "temporal_tls_key_path": None,
                    "temporal_tls_ca_path": None,
                }
            )
            client = await connect_temporal(settings, timeout=30, blobs=repo)
            # Files this start created (the history store's) exist now: make them
            # private too, quietly (the first pass reported what was exposed before).
            secure_data_dir(settings.data_dir, report=False)
            deps = await worker_deps(settings, repo)
            try:
                name, key, approver_key = await start_keys(
                    repo, self.key_name, settings.data_dir, new_keys=self.new_keys)
            except ApiKeyNameTakenError as exc:
                raise StartupError(
                    f"an active API key is already named {self.key_name!r}: "
                    "pick another --key-name"
                ) from exc
            server = api_server(
                self.app_factory(
                    settings, repo, client, deps.pipeline.registry, worker_in_process=True
                ),
                host,
                settings.api_port,
                log_level=self.log_level,
            )
            api_url = f"http://{host}:{settings.api_port}"
            banner = Banner(
                api_url=api_url,
                audit_url=f"{api_url}/audit",
                temporal_ui_url=f"http://{dev.host}:{dev.ui_port}",
                temporal_address=dev.address,
                api_key=key,
                api_key_name=name,
                approver_key=approver_key,
                data_dir=settings.data_dir,
                database=display_url(settings.effective_database_url),
            )
            async with working(client, settings, deps):
                yield banner, server
        finally:
            await dev.stop()
            await repo.close()

    async def run(self, on_ready: Callable[[Banner], None], stop: asyncio.Event) -> None:
        """Run until `stop` is set; call `on_ready` once the API accepts connections."""
        async with self.running() as (banner, server):
            task = asyncio.create_task(serve_until(server, stop), name="parkgate-serve")
            runtime: Path | None = None
            try:
                while not server.started and not task.done():
                    await asyncio.sleep(0.05)
                if server.started:
                    runtime = write_runtime(banner.data_dir, banner)
                    on_ready(banner)
            finally:
                try:
                    await task
                finally:
                    if runtime is not None:
                        runtime.unlink(missing_ok=True)
