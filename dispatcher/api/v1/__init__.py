"""The agent API under /v1, one module per resource.

`router` holds every /v1 route, in the order the API documents them.
"""

from __future__ import annotations

from fastapi import APIRouter

from parkgate.api.v1 import audit, confirmations, events, sessions, tool_calls, tools

router = APIRouter()
for _resource in (sessions, tool_calls, tools, confirmations, audit, events):
    router.include_router(_resource.router)

__all__ = ["router"]
