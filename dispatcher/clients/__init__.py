"""Tools the agent's own process runs: parkgate gates their calls, never runs them.

`client_tools` (a session's declared client tools), `confinement` (the paths
an agent's file and shell tools reach, and which of them are off limits).
Each coding agent's own tools and answers live in parkgate.dialects. Pure.
"""
