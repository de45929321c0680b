"""Attach a resubmitted call to its still-parked twin (setting `attach_same_input`).

A client that cannot resend the same tool_use_id (a model retrying through
MCP gets a fresh id) would otherwise park a second call for the same thing.
A new id with the same tool and canonical input as a call of the same session
still parked within the window answers with that call instead.
"""

from __future__ import annotations

from datetime import timedelta

from parkgate.models import ToolUseBlock, input_hash, utcnow
from parkgate.records import CallStatus
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters, SessionRecord

#: Parked calls of one tool looked at (newest first).
_LOOK_AT = 50


async def same_input_call(
    repo: Repository, settings: Settings, session: SessionRecord, call: ToolUseBlock
) -> str | None:
    """The tool_use_id of a parked call with the same tool and input, if `call`
    is new and the setting is on; None otherwise."""
    if not settings.attach_same_input:
        return None
    if await repo.get_call(session.session_id, call.id) is not None:
        return None  # a known id attaches to itself
    since = utcnow() - timedelta(seconds=settings.attach_same_input_window_seconds)
    page = await repo.list_calls(
        CallFilters(session_id=session.session_id, tool_name=call.name,
                    status=CallStatus.PARKED, since=since),
        limit=_LOOK_AT,
    )
    wanted = input_hash(call.name, call.input)
    twins = [row for row in page.items if row.input_hash == wanted]
    return twins[-1].tool_use_id if twins else None
