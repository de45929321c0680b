"""End a composed tool's sub-call approval whose workflow task cannot heal.

A SubCallApproval child workflow (workflows/subcall_park.py) waits for a
human on one sub-call; its parent call waits on it. When the child's task
fails for a reason no retry fixes (parkgate.durable.stuck.assess), nothing
ever ends it: the parent call stays open, and the stored request stays in
every inbox, approvable, though no decision can reach the child. The task
healer ends it here: the stored request is closed first (`cancelled` by the
task healer, with the reason, and its tool.confirmation_resolved event), so
no approver can be told a decision applied; then the child is terminated,
and the parent learns the sub-call will not run (the gate's "could not be
parked") and carries on, or ends, as for any refused sub-call.

Idempotent: the event is built from the stored decision alone (the same
event id and content on every sweep), so a process that dies between the
steps repeats them next time without an integrity conflict.
"""

from __future__ import annotations

import logging
from typing import Any

from parkgate.calls.events import ToolEvent
from parkgate.calls.records import ApprovalRecord
from parkgate.durable.subcall_approvals import parent_of, sub_call_request_id
from parkgate.store.errors import ApprovalNotFoundError

log = logging.getLogger("parkgate.durable.stuck")

#: The decision the stored request gets: nobody's decision (like an expiry),
#: after which the sub-call never runs (parkgate.store.semantics.STOPPING).
HEALED = "cancelled"
#: `via` of that decision: who closed the request.
HEALER = "task_healer"


async def close_request(store: Any, workflow_id: str, reason: str) -> ApprovalRecord | None:
    """Close the sub-call's stored request (first write wins) and record its
    resolution; the stored record, or None when none was stored (the child's
    task failed before `create_approval`) or the store cannot say."""
    session_id, tool_use_id = ids_of(workflow_id)
    request_id = sub_call_request_id(session_id, tool_use_id)
    decide = getattr(store, "decide_approval", None)
    apply = getattr(store, "apply", None)
    if decide is None or apply is None:
        return None
    try:
        _, stored = await decide(request_id, HEALED, None, HEALER, reason)
    except ApprovalNotFoundError:
        return None
    if (stored.decision, stored.via) != (HEALED, HEALER):
        return stored  # decided before the task failed: its own event says so
    await apply([resolution_event(stored)], None)
    return stored


def resolution_event(stored: ApprovalRecord) -> ToolEvent:
    """tool.confirmation_resolved of a request the task healer closed, from
    the stored row only (so every sweep writes the same event)."""
    info = stored.info or {}
    return ToolEvent(
        type="tool.confirmation_resolved",
        session_id=stored.session_id,
        turn_id=stored.turn_id,
        tool_use_id=stored.tool_use_id,
        tool_name=stored.tool_name,
        side_effects=info.get("side_effects"),
        parent_tool_use_id=parent_of(stored),
        at=stored.decided_at or stored.requested_at,
        request_id=stored.request_id,
        data={k: v for k, v in {"decision": stored.decision, "via": stored.via,
                                "reason": stored.reason}.items() if v is not None},
    )


def ids_of(workflow_id: str) -> tuple[str, str]:
    """(session_id, sub-call tool_use_id) of `call/{session_id}/{parent}.{n}`."""
    _, _, rest = workflow_id.partition("/")
    session_id, _, tool_use_id = rest.partition("/")
    return session_id, tool_use_id
