"""MCP servers as tool sources behind the gate (settings `mcp_servers`).

Their tools join the registry as `server__tool` and run in the execute
activity like any tool: classified, parked when policy says so, executed at
most once, with the class timeout and cancellation. (`config` is imported by
settings, so this package imports nothing eagerly.)
"""
