"""Free TCP ports on 127.0.0.1 and bounded waits for listeners."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    """A port the kernel says is free right now (bind to port 0, then release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port: int, timeout: float, host: str = "127.0.0.1") -> None:
    """Block until host:port accepts connections; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


def wait_port_closed(port: int, timeout: float, host: str = "127.0.0.1") -> None:
    """Block until host:port stops accepting connections."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_open(port, host):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} still listening after {timeout:.0f}s")


async def wait_port_async(port: int, timeout: float, host: str = "127.0.0.1") -> None:
    """Async twin of wait_port: other tasks (clients mid-poll) keep running."""
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 0.5)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.1)
            continue
        writer.close()
        return
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s")
