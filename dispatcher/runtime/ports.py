"""TCP ports on this machine: free ones, listening sockets for uvicorn, bounded waits.

The one place `parkgate serve`, the bench and every test rig get a port from.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import random
import socket
import time
from pathlib import Path

LOCALHOST = "127.0.0.1"


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED_PORT = 10000
MIN_PICK_SPAN = 1000  # fewer port numbers than this below the range: the OS picks
PICK_ATTEMPTS = 200
_recently_picked: collections.deque[int] = collections.deque(maxlen=256)


def ephemeral_range() -> tuple[int, int] | None:
    """The kernel's range for outgoing connections and bind(0), when it says."""
    try:
        low, high = (int(part) for part in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def _os_picked_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_port(host: str = LOCALHOST) -> int:
    """A port nothing listens on right now (racy by nature: prefer
    `listening_socket()` when the caller can hand over a socket).

    Picked below the kernel's ephemeral range where the kernel says what it is:
    a server stopped and started again on the same port (an API or dev server
    restart, a crashed `serve` started anew) would otherwise find it taken by
    any outgoing connection's local end, or its TIME_WAIT, that happened to get
    that number in between; the kernel never hands those out below the range.
    Nor does this process hand out one port twice in a row of picks (a dev
    server asks for four before it binds any).
    """
    span = ephemeral_range()
    if span is None or span[0] - LOWEST_PICKED_PORT <= MIN_PICK_SPAN:
        return _os_picked_port(host)
    for _ in range(PICK_ATTEMPTS):
        port = random.randrange(LOWEST_PICKED_PORT, span[0])
        if port not in _recently_picked and not port_in_use(host, port):
            _recently_picked.append(port)
            return port
    return _os_picked_port(host)


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (bind fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def pick_port(host: str, preferred: int) -> int:
    """`preferred` when free, else any free port (0 = any)."""
    if preferred and not port_in_use(host, preferred):
        return preferred
    return free_port(host)


def listening_socket(host: str = LOCALHOST, port: int = 0) -> socket.socket:
    """A bound TCP socket to hand to uvicorn (`server.serve(sockets=[...])`).

    Created with proto=IPPROTO_TCP on purpose: asyncio turns Nagle off
    (TCP_NODELAY) only for sockets whose proto says TCP, and a plain
    `socket.socket(AF_INET, SOCK_STREAM)` has proto 0, which its accepted
    connections inherit. With Nagle on, uvicorn's header and body writes meet
    the client's delayed ACK and every response waits ~40 ms.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def port_open(port: int, host: str = LOCALHOST) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port: int, timeout: float, host: str = LOCALHOST) -> None:
    """Block until host:port accepts connections; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s")


def wait_port_closed(port: int, timeout: float, host: str = LOCALHOST) -> None:
    """Block until host:port stops accepting connections."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_open(port, host):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{host}:{port} still listening after {timeout:.0f}s")


async def wait_port_async(port: int, timeout: float, host: str = LOCALHOST) -> None:
    """Async twin of wait_port: other tasks (clients mid-poll) keep running."""
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


async def wait_port_free(host: str, port: int, timeout: float) -> bool:
    """Wait for a just-stopped server's port to be released; False if it never is."""
    deadline = time.monotonic() + timeout
    while port_in_use(host, port):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True
