"""One client session to an MCP server, over stdio or streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from parkgate.mcp_source.config import McpServer


@asynccontextmanager
async def open_session(server: McpServer) -> AsyncIterator[ClientSession]:
    """An initialized session; the stdio server process lives as long as the block."""
    if server.command is not None:
        params = StdioServerParameters(
            command=server.command[0], args=server.command[1:], env=server.env or None,
            cwd=server.cwd,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session
        return
    assert server.url is not None
    async with httpx2.AsyncClient(headers=server.headers, timeout=30) as http, \
            streamable_http_client(server.url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session
