"""The floor: an empty workflow, started the fastest way (eager start) on the same server.

Kept free of I/O imports: the workflow sandbox re-imports this module.
"""

from __future__ import annotations

from pydantic import BaseModel
from temporalio import workflow


class Empty(BaseModel):
    pass


@workflow.defn(name="bench.Floor")
class FloorWorkflow:
    """Does nothing: its latency is what Temporal itself costs per workflow."""

    @workflow.run
    async def run(self, _: Empty) -> Empty:
        return Empty()
