"""Many concurrent apply() calls (PostgreSQL; SQLite from two repositories): no fork,
no duplicate, no gap."""

from __future__ import annotations

import asyncio
import random

from parkgate.store import Repository
from tests.store.helpers import event, finished, uid


async def test_concurrent_apply_keeps_chains_linear(pg_repo: Repository) -> None:
    sid = uid("s")
    calls = [uid("c") for _ in range(6)]
    per_call = 8
    batches = []
    for cid in calls:
        for i in range(per_call):
            batches.append([event(sid, cid, "tool.called", seq=i, n=i)])
    # Every batch twice (retried activities), shuffled, all at once.
    work = batches + batches
    random.Random(7).shuffle(work)
    sem = asyncio.Semaphore(16)

    async def one(evs: list) -> int:
        async with sem:
            return await pg_repo.record(evs, finished(sid, evs[0].tool_use_id))

    added = await asyncio.gather(*(one(b) for b in work))
    assert sum(added) == len(calls) * per_call
    stored = await pg_repo.events_after(sid, 0, limit=1000)
    assert len(stored) == len(calls) * per_call
    for cid in calls:
        chain = [e for e in stored if e.chain_id == cid]
        assert [e.chain_index for e in chain] == list(range(per_call))
    report = await pg_repo.verify_chain(sid)
    assert report.ok, report.problems
    assert report.chains == len(calls)


async def test_concurrent_apply_sqlite(sqlite_repo: Repository) -> None:
    sid = uid("s")
    work = [[event(sid, f"c{i % 3}", "tool.called", seq=i)] for i in range(30)]
    added = await asyncio.gather(*(sqlite_repo.record(b) for b in work + work))
    assert sum(added) == 30
    assert (await sqlite_repo.verify_chain()).ok


async def test_sse_reader_sees_every_event_once_while_writers_run(pg_repo: Repository) -> None:
    """A reader resuming after the last seq it saw never skips a late commit."""
    sid = uid("s")
    work = [[event(sid, f"c{i % 5}", "tool.called", seq=i)] for i in range(60)]
    seen: list[int] = []
    done = asyncio.Event()

    async def reader() -> None:
        last = 0
        while True:
            finished_writing = done.is_set()
            batch = await pg_repo.events_after(sid, last)
            seen.extend(e.seq for e in batch)
            if batch:
                last = batch[-1].seq
            elif finished_writing:
                return
            await asyncio.sleep(0)

    async def writers() -> None:
        sem = asyncio.Semaphore(8)

        async def one(evs: list) -> None:
            async with sem:
                await pg_repo.apply(evs)

        await asyncio.gather(*(one(b) for b in work))
        done.set()

    await asyncio.gather(reader(), writers())
    stored = [e.seq for e in await pg_repo.events_after(sid, 0, limit=1000)]
    assert len(stored) == 60
    assert seen == stored


async def test_concurrent_apply_on_one_sqlite_file_from_two_repositories(
    sqlite_url: str,
) -> None:
    """Two repositories of one process on one SQLite file (as API and worker in
    `parkgate serve`): writers queue on one lock, chains stay linear, nothing is
    written twice."""
    from parkgate.store.engine import sqlite_writer_lock

    first = await Repository.connect(sqlite_url)
    second = await Repository.connect(sqlite_url)
    try:
        assert first._sync_engine is not None and second._sync_engine is not None
        assert sqlite_writer_lock(first._sync_engine) is sqlite_writer_lock(second._sync_engine)
        sid = uid("s")
        calls = [uid("c") for _ in range(6)]
        per_call = 8
        batches = [
            [event(sid, cid, "tool.called", seq=i, n=i)] for cid in calls for i in range(per_call)
        ]
        work = batches + batches
        random.Random(11).shuffle(work)

        async def one(i: int, evs: list) -> int:
            repo = first if i % 2 else second
            return await repo.record(evs, finished(sid, evs[0].tool_use_id))

        added = await asyncio.gather(*(one(i, b) for i, b in enumerate(work)))
        assert sum(added) == len(calls) * per_call
        stored = await first.events_after(sid, 0, limit=1000)
        for cid in calls:
            chain = [e for e in stored if e.chain_id == cid]
            assert [e.chain_index for e in chain] == list(range(per_call))
        report = await second.verify_chain(sid)
        assert report.ok, report.problems
    finally:
        await first.close()
        await second.close()
