"""`parkgate.slack_post` through a store outage (issue 37): the post's catch-up
reads the store; a store that does not answer must not fail the activity, or
every retry would post the approval message to Slack again."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url
from temporalio.testing import ActivityEnvironment

from parkgate.activities.slack import SlackActivities
from parkgate.runtime.ports import free_port
from parkgate.store.repository import Repository
from tests.api.fake_slack import FakeSlack
from tests.api.test_slack import slack_settings
from tests.channels.test_webhook import notice
from tests.fixtures.db import fresh_pg_database
from tests.fixtures.temporal import make_settings


async def test_a_store_that_does_not_answer_the_catch_up_posts_once(
    pg_url: str, tmp_path: Path
) -> None:
    down = make_url(pg_url).set(host="127.0.0.1", port=free_port())
    repo = await Repository.connect(down.render_as_string(hide_password=False))
    try:
        async with FakeSlack().running() as fake:
            settings = make_settings(tmp_path, tmp_path, **slack_settings(fake))
            ref = await ActivityEnvironment().run(SlackActivities(settings, repo).post, notice())
            assert [ts for _, ts in fake.messages] == [ref.ts]
            assert fake.attempts.get("chat.postMessage") == 1
    finally:
        await repo.close()


async def test_any_other_store_failure_still_fails_the_post(
    pg_url: str, tmp_path: Path
) -> None:
    # A database that answers but has no tables: a wrong statement, not an outage.
    async with fresh_pg_database() as url, FakeSlack().running() as fake:
        repo = await Repository.connect(url)
        try:
            settings = make_settings(tmp_path, tmp_path, **slack_settings(fake))
            try:
                await ActivityEnvironment().run(SlackActivities(settings, repo).post, notice())
            except Exception as exc:
                failed: BaseException | None = exc
            else:
                failed = None
        finally:
            await repo.close()
    assert failed is not None
