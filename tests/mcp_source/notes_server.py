"""A real MCP server (the SDK's low-level Server over stdio), run as a subprocess
by the tests. NOTES_FILE collects what append_note wrote; PID_FILE gets the pid
of a process running `hang`."""

from __future__ import annotations

import os

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

OBJ = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
       "additionalProperties": False}
EMPTY = {"type": "object", "properties": {}, "additionalProperties": False}


def tool(name: str, schema: dict, **hints: bool) -> types.Tool:
    return types.Tool(name=name, description=f"test tool {name}", input_schema=schema,
                      annotations=types.ToolAnnotations(**hints) if hints else None)


TOOLS = [
    tool("lookup", OBJ, read_only_hint=True),
    tool("append_note", OBJ, destructive_hint=True),
    tool("fetch", OBJ, open_world_hint=True),
    tool("plain", EMPTY),
    tool("wide", {"type": "object", "properties": {"x": {"anyOf": [{"type": "string"},
                                                                    {"type": "integer"}]}}},
         read_only_hint=True),
    tool("crash", EMPTY, read_only_hint=True),
    tool("hang", EMPTY, read_only_hint=True),
]


async def list_tools(ctx, params) -> types.ListToolsResult:  # type: ignore[no-untyped-def]
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params) -> types.CallToolResult:  # type: ignore[no-untyped-def]
    args = params.arguments or {}
    if params.name == "lookup":
        return types.CallToolResult(content=[types.TextContent(text=f"found {args['text']}")])
    if params.name == "append_note":
        with open(os.environ["NOTES_FILE"], "a") as f:
            f.write(args["text"] + "\n")
        return types.CallToolResult(content=[types.TextContent(text="noted")])
    if params.name == "crash":
        os._exit(3)  # the server dies mid-call
    if params.name == "hang":
        with open(os.environ["PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            with open(os.environ["PID_FILE"] + ".cancelled", "w") as f:
                f.write("notifications/cancelled")  # the client's cancellation arrived
            raise
    return types.CallToolResult(content=[types.TextContent(text="refused")], is_error=True)


async def main() -> None:
    server = Server("notes", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
