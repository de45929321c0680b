"""`python -m tests.workflows.composed_worker`: the production worker, plus the
test composed tools (a non-atomic one), for tests that SIGKILL a worker while
a composed call's sub-call waits for approval."""

from __future__ import annotations

import asyncio
from typing import cast

from parkgate.activities.deps import Deps
from parkgate.calls.records import HistoryStore
from parkgate.runtime.worker import build_pipeline, run_worker
from parkgate.settings import get_settings
from parkgate.store import Repository
from tests.workflows.test_composed import TwoWrites


async def main() -> None:
    settings = get_settings()
    repo = await Repository.connect(settings.effective_database_url, check_schema=True)
    pipeline = build_pipeline(settings, extra_tools=[TwoWrites])
    await run_worker(settings, deps=Deps(settings=settings, pipeline=pipeline,
                                         store=cast(HistoryStore, repo)))


if __name__ == "__main__":
    asyncio.run(main())
