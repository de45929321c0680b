"""Attach a resubmitted call to its still-parked twin (setting `attach_same_input`).

A client that cannot resend the same tool_use_id (a model retrying through
MCP gets a fresh id) would otherwise park a second call for the same thing.
A new id with the same tool and canonical input as a call of the same session
still parked within the window answers with that call instead (the oldest
such call, as one indexed read).
"""

from __future__ import annotations

from datetime import timedelta

from parkgate.calls.records import CallStatus
from parkgate.models import ToolUseBlock, input_hash_forms, utcnow
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters, SessionRecord


async def same_input_call(
    repo: Repository, settings: Settings, session: SessionRecord, call: ToolUseBlock,
    *, always: bool = False,
) -> str | None:
    """The tool_use_id of a parked call with the same tool and input, if `call`
    is new and the setting is on (or `always`: the client sends no call ids,
    so the same call again is how it picks up a decision); None otherwise."""
    if not settings.attach_same_input and not always:
        return None
    since = utcnow() - timedelta(seconds=settings.attach_same_input_window_seconds)
    twin = await repo.oldest_with_input(
        CallFilters(session_id=session.session_id, tool_name=call.name,
                    status=CallStatus.PARKED, since=since),
        input_hash_forms(call.name, call.input),
    )
    if twin is None or twin == call.id:
        return None
    # Rarely reached: only then does it matter whether the id is known (a known
    # id attaches to itself).
    return twin if await repo.get_call(session.session_id, call.id) is None else None
