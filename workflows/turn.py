"""TurnWorkflow: one assistant message's tool calls, capped per session, in order.

Each call is a child ToolCallWorkflow with the canonical id
`call/{session_id}/{tool_use_id}`, so a call can be attached to, decided and
cancelled on its own. At most `concurrency` children run at once; results come
back in the order of the input.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from parkgate.calls.records import status_for
    from parkgate.durable.payloads import (
        TURN_WORKFLOW,
        CallInput,
        CallOutcome,
        TurnInput,
        TurnOutcome,
        call_workflow_id,
    )
    from parkgate.models import ToolErrorClass, ToolUseBlock

from parkgate.workflows.call import ToolCallWorkflow
from parkgate.workflows.call_record import error_result

#: workflow.patched id: a child call whose workflow already ran to its end (submitted
#: alone or in another turn) is refused, never started again (its events would
#: contradict the stored ones, and a side effect would run twice).
PATCH_NO_RERUN = "turn-child-no-rerun"


def _failed(call: ToolUseBlock, error_class: ToolErrorClass, text: str) -> CallOutcome:
    return CallOutcome(
        result=error_result(call.id, error_class, text),
        status=status_for(error_class),
        error_class=error_class,
    )


@workflow.defn(name=TURN_WORKFLOW)
class TurnWorkflow:
    """Runs a batch of calls as children under the session's concurrency cap."""

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnOutcome:
        gate = asyncio.Semaphore(inp.concurrency)
        seen: set[str] = set()
        reuse = (
            WorkflowIDReusePolicy.REJECT_DUPLICATE
            if workflow.patched(PATCH_NO_RERUN)
            else WorkflowIDReusePolicy.ALLOW_DUPLICATE
        )

        async def one(call: ToolUseBlock) -> CallOutcome:
            if call.id in seen:
                return _failed(
                    call,
                    ToolErrorClass.VALIDATION_ERROR,
                    f"duplicate tool_use id {call.id!r} in one turn; it ran only once",
                )
            seen.add(call.id)
            async with gate:
                try:
                    return await workflow.execute_child_workflow(
                        ToolCallWorkflow.run,
                        CallInput(call=call, session=inp.session,
                                  client_tool=next((t for t in inp.client_tools
                                                    if t.name == call.name), None)),
                        id=call_workflow_id(inp.session.session_id, call.id),
                        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                        id_reuse_policy=reuse,
                    )
                except WorkflowAlreadyStartedError:
                    return _failed(
                        call,
                        ToolErrorClass.EXECUTION_ERROR,
                        "this tool_use id was already submitted (alone or in another "
                        "turn); attach to it by tool_use_id",
                    )
                except ChildWorkflowError as exc:
                    return _failed(
                        call, ToolErrorClass.EXECUTION_ERROR, f"call workflow failed: {exc.cause}"
                    )

        outcomes = await asyncio.gather(*(one(c) for c in inp.calls))
        return TurnOutcome(outcomes=list(outcomes))
