"""Talk to a parkgate server from an agent: sync and async clients over httpx.

Typed with the models the API answers with (`parkgate.calls.wire`: no server
code, so an agent embedding the client loads no FastAPI, Temporal or SQL);
method names follow `ToolDispatcher` where they mean the same thing
(`dispatch`, `dispatch_all`, `cancel_session_tools`,
`get_definitions_for_session`). `gate` puts a function the agent runs itself
behind parkgate (docs/CLIENT_TOOLS.md).
"""

from parkgate.agent_client._gate_common import Notice
from parkgate.agent_client.aio import AsyncParkgateClient
from parkgate.agent_client.errors import (
    CallNotFinishedError,
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
    OutcomeNotRecordedError,
    ParkedError,
    ParkgateError,
    UnauthorizedError,
    UnavailableError,
)
from parkgate.agent_client.gate_aio import AsyncGatedFunction, AsyncToolGate
from parkgate.agent_client.gate_sync import GatedFunction, ToolGate
from parkgate.agent_client.gated import gate, tool_gate
from parkgate.agent_client.sync import ParkgateClient

__all__ = [
    "AsyncGatedFunction",
    "AsyncParkgateClient",
    "AsyncToolGate",
    "CallNotFinishedError",
    "ConflictError",
    "ForbiddenError",
    "GatedFunction",
    "InvalidInputError",
    "NotFoundError",
    "Notice",
    "OutcomeNotRecordedError",
    "ParkedError",
    "ParkgateClient",
    "ParkgateError",
    "ToolGate",
    "UnauthorizedError",
    "UnavailableError",
    "gate",
    "tool_gate",
]
