"""Client tools: tools the agent's own process runs; parkgate gates their calls, never runs them.

`declared` (a session's declared client tools and how they are classed),
`confinement` (the paths an agent's file and shell tools reach, and which of
them are off limits). Each coding agent's own tools and answers live in
parkgate.dialects; the HTTP library agents embed is parkgate.agent_client. Pure.
"""
