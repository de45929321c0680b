"""`parkgate audit verify --against-temporal`: the store against Temporal's histories.

Temporal's history is what was committed: the decide update that won (its
completed outcome says `accepted`) and the call's final `CallOutcome`. For
every call whose workflow history Temporal still keeps (retention may have
dropped older ones: those are counted, not failed), the store's call row must
name the same winner and end in the same status.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import select
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from parkgate.approvals.decisions import DecisionRecord
from parkgate.durable.payloads import UPDATE_DECIDE, CallOutcome, DecideResult
from parkgate.store.semantics import MeaningProblem

#: Histories fetched at once.
_PARALLEL = 8


class TemporalFacts(BaseModel):
    """What one workflow history says was committed."""

    winner: DecisionRecord | None = None
    outcome: CallOutcome | None = None


class TemporalReport(BaseModel):
    compared: int = 0
    #: Calls whose history Temporal no longer keeps (or never had).
    not_kept: int = 0
    problems: list[MeaningProblem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


async def history_facts(client: Client, events: list[HistoryEvent]) -> TemporalFacts:
    """The accepted decision and the final outcome recorded in a call's history."""
    facts = TemporalFacts()
    converter = client.data_converter
    #: Ids of accepted `decide` updates (a call also takes client `claim` and
    #: `report_outcome` updates, whose results are other models).
    decides: set[str] = set()
    for event in events:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request
            if request.input.name == UPDATE_DECIDE:
                decides.add(request.meta.update_id)
        elif event.HasField("workflow_execution_update_completed_event_attributes"):
            completed = event.workflow_execution_update_completed_event_attributes
            outcome = completed.outcome
            if completed.meta.update_id not in decides:
                continue
            if outcome.HasField("success") and outcome.success.payloads:
                [result] = await converter.decode(outcome.success.payloads, [DecideResult])
                if isinstance(result, DecideResult) and result.accepted and result.winner:
                    facts.winner = result.winner
        elif event.HasField("workflow_execution_completed_event_attributes"):
            payloads = event.workflow_execution_completed_event_attributes.result.payloads
            if payloads:
                [done] = await converter.decode(payloads, [CallOutcome])
                if isinstance(done, CallOutcome):
                    facts.outcome = done
    if facts.outcome is not None and facts.outcome.decision is not None:
        facts.winner = facts.outcome.decision  # a signal's win shows only here
    return facts


def compare(row: dict[str, Any], facts: TemporalFacts) -> list[str]:
    """Differences between one call row and what Temporal committed."""
    found: list[str] = []
    stored = (row.get("decision"), row.get("decided_by"))
    if facts.winner is not None:
        committed = (facts.winner.decision, facts.winner.decided_by)
        if stored != committed:
            found.append(
                f"store says {_who(*stored)}, Temporal committed {_who(*committed)}"
            )
    elif stored[0] in ("allow", "deny", "allow_with_edits"):
        found.append(f"store says {_who(*stored)}, Temporal has no accepted decision")
    if facts.outcome is not None and row.get("status") != facts.outcome.status.value:
        found.append(
            f"store status {row.get('status')}, Temporal outcome {facts.outcome.status.value}"
        )
    return found


async def compare_store_with_temporal(
    repo: Any, client: Client, session_id: str | None = None
) -> TemporalReport:
    """Compare every top-level call row that names a workflow with its history."""
    from parkgate.store.statements import CALLS

    query = select(
        CALLS.c.session_id,
        CALLS.c.tool_use_id,
        CALLS.c.workflow_id,
        CALLS.c.run_id,
        CALLS.c.status,
        CALLS.c.decision,
        CALLS.c.decided_by,
    ).where(CALLS.c.workflow_id.is_not(None), CALLS.c.parent_tool_use_id.is_(None))
    if session_id is not None:
        query = query.where(CALLS.c.session_id == session_id)
    async with repo.engine.connect() as conn:
        rows = [dict(r) for r in (await conn.execute(query)).mappings()]
    report = TemporalReport()
    gate = asyncio.Semaphore(_PARALLEL)

    async def one(row: dict[str, Any]) -> None:
        handle = client.get_workflow_handle(row["workflow_id"], run_id=row["run_id"])
        async with gate:
            try:
                history = await handle.fetch_history()
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    report.not_kept += 1
                    return
                raise
        facts = await history_facts(client, list(history.events))
        report.compared += 1
        report.problems.extend(
            MeaningProblem(
                session_id=row["session_id"],
                tool_use_id=row["tool_use_id"],
                detail=f"against Temporal: {detail}",
            )
            for detail in compare(row, facts)
        )

    await asyncio.gather(*(one(r) for r in rows))
    report.problems.sort(key=lambda p: (p.session_id, p.tool_use_id))
    return report


def _who(decision: Any, decided_by: Any) -> str:
    return f"{decision} by {decided_by}" if decided_by else str(decision)
