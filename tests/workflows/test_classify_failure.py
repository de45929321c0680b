"""A classification that fails for good (not a store outage) ends the call
with an error outcome after its attempts; it never fails the workflow."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.models import ToolErrorClass, ToolUseBlock
from parkgate.store.migrate import upgrade_async
from parkgate.store.repository import Repository
from tests.fixtures.db import fresh_pg_database
from tests.fixtures.temporal import durable_rig


async def test_a_broken_remembered_rule_lookup_ends_the_call_not_the_workflow(
    temporal_env: WorkflowEnvironment, pg_url: str, tmp_path: Path
) -> None:
    async with fresh_pg_database() as url:
        await upgrade_async(url)
        repo = await Repository.connect(url)
        try:
            async with repo.engine.begin() as conn:  # the store answers, the query is wrong
                await conn.execute(text("DROP TABLE remembered_rules"))
            async with durable_rig(temporal_env.client, repo, tmp_path) as rig:
                session = rig.session()
                parks = ToolUseBlock(id="tu", name="write_file",
                                     input={"path": "o.txt", "content": "x"})
                outcome = await rig.dispatcher.dispatch_outcome(parks, session)
            assert outcome.status == CallStatus.FAILED
            assert outcome.error_class == ToolErrorClass.EXECUTION_ERROR
            assert "could not be classified" in outcome.result.text
            row = await repo.get_call(session.session_id, "tu")
            assert row is not None and row.status == CallStatus.FAILED
        finally:
            await repo.close()
