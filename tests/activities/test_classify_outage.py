"""Classify's store reads (remembered rules) through an outage: the workflow
retries classify without a cap, so only a store that does not answer may keep
it retrying; any other failure is retried until the 5th attempt (the old cap),
which denies the call."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sqlalchemy.engine import make_url
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from parkgate.activities.classify import (
    CLASSIFY_ATTEMPTS,
    STORE_UNREACHABLE,
    UNCLASSIFIABLE,
    ClassifyActivities,
)
from parkgate.durable.payloads import ClassifyInput, ClassifyOutput
from parkgate.models import Session, ToolUseBlock
from parkgate.runtime.ports import free_port
from parkgate.store.repository import Repository
from parkgate.verdicts import Deny
from tests.activities.test_activities import deps_for
from tests.fixtures.db import fresh_pg_database
from tests.store.test_unreachable import no_connections_role


async def _classify(repo: Repository, tmp_path: Path, attempt: int) -> object:
    deps = deps_for(repo, tmp_path)
    session = Session(session_id="s", turn_id="t",
                      workspace_path=str(deps.settings.workspace_roots[0]))
    parks = ToolUseBlock(id="tu", name="write_file", input={"path": "a", "content": "b"})
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    try:
        return await env.run(ClassifyActivities(deps).classify,
                             ClassifyInput(call=parks, session=session))
    except Exception as exc:
        return exc


async def test_a_store_that_does_not_answer_is_retried_at_any_attempt(
    pg_url: str, tmp_path: Path
) -> None:
    down = make_url(pg_url).set(host="127.0.0.1", port=free_port())
    repo = await Repository.connect(down.render_as_string(hide_password=False))
    try:
        exc = await _classify(repo, tmp_path, attempt=50)
    finally:
        await repo.close()
    assert isinstance(exc, ApplicationError) and exc.type == STORE_UNREACHABLE, repr(exc)
    assert not exc.non_retryable


async def test_any_other_failure_is_denied_at_the_fifth_attempt(
    pg_url: str, tmp_path: Path
) -> None:
    # A database that answers but has no tables: a wrong statement, not an outage.
    async with fresh_pg_database() as url:
        repo = await Repository.connect(url)
        try:
            early = await _classify(repo, tmp_path, attempt=CLASSIFY_ATTEMPTS - 1)
            last = await _classify(repo, tmp_path, attempt=CLASSIFY_ATTEMPTS)
        finally:
            await repo.close()
    assert isinstance(early, Exception) and not isinstance(early, ApplicationError), early
    assert isinstance(last, ClassifyOutput) and isinstance(last.verdict, Deny), repr(last)
    assert last.verdict.result.text == UNCLASSIFIABLE


async def test_a_server_at_its_connection_limit_is_waited_for(
    pg_url: str, tmp_path: Path
) -> None:
    """'too many connections' (53300) is an outage too: retried, never denied."""
    async with no_connections_role() as role:
        full = make_url(pg_url).set(username=role).render_as_string(hide_password=False)
        repo = await Repository.connect(full)
        try:
            exc = await _classify(repo, tmp_path, attempt=50)
        finally:
            await repo.close()
    assert isinstance(exc, ApplicationError) and exc.type == STORE_UNREACHABLE, repr(exc)
