"""The agent API under /v1, one module (and one APIRouter) per resource.

`ROUTERS` lists them in the order the API documents them; the app includes
each one.
"""

from __future__ import annotations

from fastapi import APIRouter

from parkgate.api.agents.v1 import (
    audit,
    client_calls,
    confirmations,
    events,
    hooks,
    sessions,
    tool_calls,
    tools,
    workspaces,
)

ROUTERS: tuple[APIRouter, ...] = tuple(
    resource.router
    for resource in (sessions, tool_calls, client_calls, tools, confirmations, audit, events,
                     workspaces, hooks)
)
