"""The sockets `serve`, the bench and the test rigs hand to uvicorn."""

from __future__ import annotations

import asyncio
import socket

from parkgate.runtime.ports import listening_socket


async def test_accepted_connections_have_nagle_off() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose proto is TCP; a socket made
    with proto 0 left Nagle on and every HTTP response waited ~40 ms for the
    client's delayed ACK."""
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accept(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    sock = listening_socket()
    server = await asyncio.start_server(accept, sock=sock)
    try:
        host, port = sock.getsockname()[:2]
        _reader, writer = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
