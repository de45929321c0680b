"""`parkgate.client_outcome`: store what a client reported of a call it ran.

The same rules as a hosted tool's result: text blocks are truncated for the
model (`Limits.text_chars`), the whole report is kept as the call's full
output (downloadable), and large payloads travel by reference (the data
converter). Idempotent: events on their ids, the row on its key; a retried
write finds the stored final state and returns it.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from parkgate.activities.deps import Deps
from parkgate.approvals import proof
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import CallEnd, CallStatus
from parkgate.calls.rows import ended
from parkgate.durable.client_payloads import (
    ACT_CLIENT_OUTCOME,
    ClientOutcomeRecord,
    ClientOutcomeRecorded,
)
from parkgate.models import TextBlock, ToolErrorClass, ToolResultBlock
from parkgate.truncation import truncate_text


def client_result(inp: ClientOutcomeRecord, text_chars: int) -> ToolResultBlock:
    """The result block the model gets from a client's report."""
    report = inp.report
    blocks: list[Any] = [
        TextBlock(text=truncate_text(b.text, text_chars)) if isinstance(b, TextBlock) else b
        for b in report.content
    ] or [TextBlock(text="(no output)" if not report.is_error else "The tool failed.")]
    return ToolResultBlock(
        tool_use_id=inp.ref.tool_use_id, content=blocks, is_error=report.is_error,
        error_class=ToolErrorClass.EXECUTION_ERROR if report.is_error else None,
    )


class ClientOutcomeActivities:
    """Store writes of a client-executed call's outcome."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn(name=ACT_CLIENT_OUTCOME)
    async def client_outcome(self, inp: ClientOutcomeRecord) -> ClientOutcomeRecorded:
        result = client_result(inp, self.deps.pipeline.limits.text_chars)
        if inp.check_proof:
            unproven = proof.problem(inp.report, proof.KIND_OUTCOME,
                                     activity.info().workflow_id or "")
            if unproven is not None:
                return ClientOutcomeRecorded(result=result, status=CallStatus.OUTCOME_UNKNOWN,
                                             unproven=unproven)
        if inp.late:
            # Beside outcome_unknown: the event carries the report (truncated),
            # the call's row, status and result stay as they are.
            events = [e.model_copy(update={"data": {**e.data, "result": result.model_dump(
                mode="json")}}) for e in inp.events]
            await self.deps.store.apply(events, None)
            return ClientOutcomeRecorded(result=result, status=CallStatus.OUTCOME_UNKNOWN)
        status = CallStatus.FAILED if result.is_error else CallStatus.SUCCEEDED
        ref = inp.ref
        duration = None
        if inp.started_at is not None:
            duration = (inp.finished_at - inp.started_at).total_seconds() * 1000
        full = {"content": [b.model_dump(mode="json") for b in inp.report.content],
                "success": not inp.report.is_error}
        final = ToolEvent(
            type="tool.failed" if result.is_error else "tool.completed",
            session_id=ref.session_id, turn_id=ref.turn_id or "", tool_use_id=ref.tool_use_id,
            tool_name=ref.tool_name or "", at=inp.finished_at,
            side_effects=inp.events[0].side_effects if inp.events else None,
            error_class=result.error_class,
            message=truncate_text(result.text, 2000) if result.is_error else None,
            data={"duration_ms": duration, "executed_by": "client"},
        )
        end = CallEnd(result=result, status=status, error_class=result.error_class,
                      duration_ms=duration)
        row = ended(ref, end, finished_at=inp.finished_at, started_at=inp.started_at,
                    request_id=inp.request_id, full_output=full)
        events = [*inp.events, final]
        conditional = getattr(self.deps.store, "record_unless_finished", None)
        if conditional is not None:
            finished = await conditional(events, row)
            if finished is not None:
                return ClientOutcomeRecorded(result=finished.result, status=finished.status,
                                             finished=finished)
        else:
            await self.deps.store.apply(events, row)
        return ClientOutcomeRecorded(result=result, status=status)
