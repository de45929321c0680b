"""The shared time-skipping server survives a test that leaves a workflow open.

A scheduled workflow task nobody polls keeps the test server's time-skipping
locked (terminating its workflow does not release it), so the fixture
replaces the server after such a test (tests/fixtures/temporal.py).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.fixtures.temporal import TimeSkippingServer


@workflow.defn(sandboxed=False)
class Nap:
    @workflow.run
    async def run(self, seconds: int) -> str:
        await workflow.sleep(timedelta(seconds=seconds))
        return "woke"


async def test_a_workflow_left_open_does_not_stall_the_next_test() -> None:
    server = TimeSkippingServer()
    try:
        env = await server.get()
        # A test that ends with its call still waiting and its worker gone.
        await env.client.start_workflow(Nap.run, 3600, id="left-open", task_queue="gone")
        assert await server.after_test() == ["left-open"]
        assert server.restarts == 1

        env = await server.get()
        async with Worker(env.client, task_queue="next", workflows=[Nap],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            handle = await env.client.start_workflow(Nap.run, 7200, id="next", task_queue="next")
            # Two hours pass in milliseconds: time-skipping is not held.
            assert await asyncio.wait_for(handle.result(), timeout=30) == "woke"
        assert await server.after_test() == []
        assert server.restarts == 1
    finally:
        await server.stop()
