"""Tools the agent's own process runs: parkgate gates their calls, never runs them.

`client_tools` (a session's declared client tools), `claude_code` (Claude
Code's tools as client tools, and its hook answers). Pure.
"""
