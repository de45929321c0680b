"""The agent API under /v1, one module (and one APIRouter) per resource.

`ROUTERS` lists them in the order the API documents them; the app includes
each one.
"""

from __future__ import annotations

from fastapi import APIRouter

from parkgate.api.v1 import audit, confirmations, events, sessions, tool_calls, tools

ROUTERS: tuple[APIRouter, ...] = tuple(
    resource.router for resource in (sessions, tool_calls, tools, confirmations, audit, events)
)
