"""Why a parked call could not be decided: what the harness keeps when a decider
got no answer (503 until its deadline), taken at that moment.

A decision is answered 503 when the call's status query is not answered or
still says `queued` (`ParkNotSettled`), when no worker accepts the update, or
when the worker refuses the API's proof (`unproven`). Those differ in what the
stack shows at that moment: which workers poll, whether the call's workflow
task fails on every attempt (a wedge: the first `WorkflowTaskFailed` event
says why; later attempts are counted only in the description), what the API
logged for the decision's requests. `explain` gathers all of it into one
text, and keeps the call's full history next to the logs (JSON, replayable
with tests/faults/harness/histories.py's tooling).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError

from parkgate.durable.payloads import call_workflow_id
from tests.faults.harness.stack import Stack

#: Worker log lines worth keeping: a failing workflow task, a replay that does
#: not match its history, any traceback.
_WORKER_TROUBLE = re.compile(
    r"nondetermin|TMPRL\d+|Failed activation|Failing workflow task|"
    r"WorkflowTaskFailed|panicked|Error\b",
    re.IGNORECASE,
)
#: What the storm's forger causes on purpose (refused plaintext decisions).
_FORGED = re.compile(r"RefusedPayloadError|Failed decoding arguments")
_FAILED_TASK = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}


def _event_line(event: object) -> str:
    """One history event as `id TYPE [failure message]`."""
    eid = getattr(event, "event_id", 0)
    kind = EventType.Name(getattr(event, "event_type", 0)).removeprefix("EVENT_TYPE_")
    extra = ""
    failed = getattr(event, "workflow_task_failed_event_attributes", None)
    if failed is not None and getattr(event, "HasField", lambda _: False)(
        "workflow_task_failed_event_attributes"
    ):
        extra = f" cause={failed.cause} {failed.failure.message[:400]!r}"
    return f"{eid} {kind}{extra}"


def history_summary(history: WorkflowHistory, tail: int = 40) -> str:
    """Every failed/timed-out workflow task and the last `tail` events, one a line."""
    events = list(history.events)
    failed = [e for e in events if e.event_type in _FAILED_TASK]
    lines = [f"history: {len(events)} events, {len(failed)} failed/timed-out workflow tasks"]
    lines += ["  " + _event_line(e) for e in failed[-5:]]
    lines.append(f"  last {min(tail, len(events))} events:")
    lines += ["  " + _event_line(e) for e in events[-tail:]]
    return "\n".join(lines)


async def describe_text(client: Client, workflow_id: str) -> str:
    """The workflow's status, its pending workflow task (attempt > 1: failing or
    timing out on every try) and pending activities."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        return f"describe {workflow_id}: {exc.status} {exc}"
    raw = desc.raw_description
    lines = [f"workflow {workflow_id}: {desc.status.name if desc.status else None}"]
    if raw.HasField("pending_workflow_task"):
        wt = raw.pending_workflow_task
        lines.append(
            f"  pending workflow task: state={wt.state} attempt={wt.attempt} "
            f"scheduled={wt.scheduled_time.ToJsonString()} "
            f"started={wt.started_time.ToJsonString() if wt.HasField('started_time') else '-'}"
        )
    for act in raw.pending_activities:
        lines.append(
            f"  pending activity {act.activity_type.name}: state={act.state} "
            f"attempt={act.attempt} last failure={act.last_failure.message[:200]!r}"
        )
    return "\n".join(lines)


def log_lines(path: Path, needles: Iterable[str], limit: int = 15) -> list[str]:
    """The last `limit` lines of a log that contain any of `needles`."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    wanted = [n for n in needles if n]
    hits = [line for line in text.splitlines() if any(n in line for n in wanted)]
    return hits[-limit:]


def worker_trouble(stack: Stack, limit: int = 12) -> str:
    """Each worker's failing-task and traceback lines (the last `limit`), and
    which workers are alive."""
    parts = []
    for w in stack.workers:
        try:
            text = w.log_path.read_text(errors="replace")
        except OSError:
            continue
        bad = [line for line in text.splitlines()
               if _WORKER_TROUBLE.search(line) and not _FORGED.search(line)]
        if bad:
            parts.append(f"--- {w.name} ({'alive' if w.running else 'dead'}): "
                         f"{len(bad)} trouble lines\n" + "\n".join(bad[-limit:]))
    alive = [w.name for w in stack.workers if w.running]
    return f"workers alive: {alive} of {len(stack.workers)} started\n" + "\n".join(parts)


async def explain(stack: Stack, session_id: str, tool_use_id: str,
                  needles: Iterable[str]) -> str:
    """Everything the stack shows about a call a decider could not decide.

    `needles` pick the API's log lines about the decision's requests (its
    paths, its request id). The call's history is written to the log
    directory as `history-<tool_use_id>.json`.
    """
    client = await Client.connect(stack.temporal_address)
    workflow_id = call_workflow_id(session_id, tool_use_id)
    parts = [await describe_text(client, workflow_id)]
    try:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
    except RPCError as exc:
        parts.append(f"history: {exc.status} {exc}")
    else:
        kept = stack.log_dir / f"history-{tool_use_id}.json"
        kept.write_text(history.to_json())
        parts.append(history_summary(history) + f"\n  (kept in {kept})")
    serving = await stack.serving_workers()
    parts.append(f"polling the task queue now: {[w.name for w in serving]}")
    parts.append(worker_trouble(stack))
    if stack.api is not None:
        api = log_lines(stack.api.log_path, [*needles, tool_use_id])
        parts.append("--- api lines about this decision:\n" + "\n".join(api))
    return "\n".join(parts)
