"""Talk to a parkgate server from an agent: sync and async clients over httpx.

Typed with the API's own models (`parkgate.api.schemas`); method names follow
`ToolDispatcher` where they mean the same thing (`dispatch`, `dispatch_all`,
`cancel_session_tools`, `get_definitions_for_session`).
"""

from parkgate.agent_client.aio import AsyncParkgateClient
from parkgate.agent_client.errors import (
    CallNotFinishedError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    ParkgateError,
    UnauthorizedError,
    UnavailableError,
)
from parkgate.agent_client.sync import ParkgateClient

__all__ = [
    "AsyncParkgateClient",
    "CallNotFinishedError",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "ParkgateClient",
    "ParkgateError",
    "UnauthorizedError",
    "UnavailableError",
]
