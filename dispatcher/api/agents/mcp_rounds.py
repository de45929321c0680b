"""Protocol 2026-07-28's multi round trip for a parked call (clients without tasks).

A 2026-07-28 client that did not declare the tasks extension, but can show a
URL (client capability `elicitation.url`), is not held while a person decides:
its tools/call is answered `input_required` with a URL-mode input request that
points at the call's item in the inbox (a person signs in there; never the
signed approval link) and a `requestState` signed by parkgate that names the
call. The client's retry of the same tools/call with that state attaches to
that call (it never starts another: the tool_use_id comes from the state), and
is answered with the result once decided, or `input_required` again while
parked. Other clients keep the held request with progress.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mcp_types as types
from itsdangerous import BadSignature, URLSafeSerializer
from mcp.server import ServerRequestContext

from parkgate.api.agents.mcp_common import result_meta
from parkgate.api.agents.mcp_tasks import TASKS_EXTENSION, is_modern
from parkgate.api.shared.schemas import CallResource
from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock

_SALT = "parkgate-mcp-request-state"
#: The key of the one input request a parked call's answer carries.
APPROVAL_INPUT = "parkgate_approval"


@dataclass(frozen=True)
class NamedCall:
    """What a `requestState` names: one call of one session."""

    session_id: str
    tool_use_id: str
    tool: str
    turn_id: str


def wanted(ctx: ServerRequestContext[Any]) -> bool:
    """A 2026-07-28 client without the tasks extension that can open a URL."""
    if not is_modern(ctx):
        return False
    caps = dict(ctx.meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY)
    if not isinstance(caps, dict):
        return False
    extensions = caps.get("extensions")
    if isinstance(extensions, dict) and TASKS_EXTENSION in extensions:
        return False
    elicitation = caps.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def seal(secret: str, call: NamedCall) -> str:
    return str(URLSafeSerializer(secret, salt=_SALT).dumps(
        [call.session_id, call.tool_use_id, call.tool, call.turn_id]))


def unseal(secret: str, state: str) -> NamedCall | None:
    """The call a state names, or None for a state parkgate did not sign."""
    try:
        fields = URLSafeSerializer(secret, salt=_SALT).loads(state)
    except BadSignature:
        return None
    if not (isinstance(fields, list) and len(fields) == 4
            and all(isinstance(f, str) for f in fields)):
        return None
    return NamedCall(*fields)


def parked_answer(secret: str, inbox: str, block: ToolUseBlock, turn_id: str,
                  session_id: str, resource: CallResource) -> types.InputRequiredResult:
    """`input_required`: a person decides in the inbox; retry with the state to attach."""
    url = f"{inbox}#r-{resource.request_id}" if resource.request_id else inbox
    message = (f"{block.name} ({block.id}) is parked for approval"
               + (f" (request {resource.request_id})" if resource.request_id else "")
               + (f" until {resource.expires_at.isoformat()}" if resource.expires_at else "")
               + ". A person with the approver role decides it in parkgate's inbox; "
               "nothing has run yet.")
    request = types.ElicitRequest(params=types.ElicitRequestURLParams(message=message, url=url))
    state = seal(secret, NamedCall(session_id, block.id, block.name, turn_id))
    return types.InputRequiredResult(
        input_requests={APPROVAL_INPUT: request}, request_state=state,
        meta=result_meta(block.id, CallStatus.PARKED),
    )
