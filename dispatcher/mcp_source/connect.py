"""One client session to an MCP server, over stdio or streamable HTTP.

The SDK's `Client` negotiates the protocol (2026-07-28 where the server speaks
it, else the 2025 handshake) and declares the tasks extension, so a server may
answer a long-running call with a task that parkgate follows (mcp_source.tasks)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from parkgate.mcp_source.config import McpServer
from parkgate.mcp_source.tasks import TasksClient


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[ClientSession]:
    """An initialized session; the stdio server process lives as long as the block."""
    if server.command is not None:
        params = StdioServerParameters(
            command=server.command[0], args=server.command[1:], env=server.env or None,
            cwd=server.cwd,
        )
        async with Client(params, extensions=[TasksClient()]) as client:
            yield client.session
        return
    assert server.url is not None
    http = httpx2.AsyncClient(headers=server.headers, timeout=30)
    transport = streamable_http_client(server.url, http_client=http)
    async with http, Client(transport, extensions=[TasksClient()]) as client:
        yield client.session
