"""SlackOutcomeWorkflow: show an ended call's outcome on its Slack message.

Started by ToolCallWorkflow as it ends, as a child that outlives it
(ParentClosePolicy.ABANDON): the call returns its result at once, and the
message update is retried here with backoff for as long as Slack needs,
without holding the call.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from parkgate.durable import activity_defs as acts
    from parkgate.durable.payloads import (
        SLACK_OUTCOME_WORKFLOW,
        SlackOutcomeInput,
    )

_RETRY = RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=30)


@workflow.defn(name=SLACK_OUTCOME_WORKFLOW)
class SlackOutcomeWorkflow:
    @workflow.run
    async def run(self, inp: SlackOutcomeInput) -> None:
        await workflow.execute_activity(
            acts.slack_outcome,
            inp,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(hours=6),
            retry_policy=_RETRY,
        )
