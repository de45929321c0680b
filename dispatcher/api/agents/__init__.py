"""The agent API: what agents and their tooling call.

REST under /v1 (`v1/`, one module per resource: sessions, tool calls,
client-executed calls, tools, confirmations, audit query, events, workspaces,
hooks); agents' hooks (`claude_code_hook` the one path every agent's hook takes,
`agent_hooks` the registered dialects onto it, `hook_gates` what differs per
agent, with `confine_checks` and `workspace_checks`); client-executed calls
(`client_calls`, `attach`, `tool_classes`); parkgate as an MCP server
(`mcp_endpoint`, which loads `mcp_gateway` and the MCP SDK on first use;
parked calls as MCP tasks in `mcp_tasks` or as protocol 2026-07-28's multi
round trip in `mcp_rounds`, what they share in `mcp_common`).

Imports `parkgate.api.shared` and nothing of `people` or `operators`
(.importlinter, "api-audiences").
"""
