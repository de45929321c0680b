"""Event inserts per second into the history store on PostgreSQL.

Creates a throwaway database on the local server (or uses --url), migrates it,
then times Repository.apply():
- single: one event per apply() (what a record activity does), sequential;
- batched: N events per apply(), sequential;
- concurrent: one event per apply() from C tasks (different calls/sessions).
Prints a Markdown table. `--smoke` runs a tiny version (seconds).

    .venv/bin/python bench/history_inserts.py [--events 2000] [--batch 50] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from parkgate.calls.events import ToolEvent, make_event_id
from parkgate.models import SideEffects
from parkgate.store import CallStatus, CallUpdate, Repository
from parkgate.store.migrate import upgrade_async

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@asynccontextmanager
async def throwaway_db(admin_url: str) -> AsyncIterator[str]:
    name = f"parkgate_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        yield admin_url.rsplit("/", 1)[0] + "/" + name
    finally:
        admin = await asyncpg.connect(admin_url)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def make_event(session: str, call: str, i: int) -> ToolEvent:
    return ToolEvent(
        type="tool.called",
        event_id=make_event_id(session, call, "tool.called", i),
        session_id=session,
        turn_id="t",
        tool_use_id=call,
        tool_name="read_file",
        side_effects=SideEffects.READ,
        data={"input": {"path": f"src/file_{i}.py"}, "i": i},
    )


async def timed(n: int, body: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await body()
    return n / (time.perf_counter() - start)


async def run(url: str, events: int, batch: int, concurrency: int) -> list[tuple[str, int, float]]:
    await upgrade_async(url)
    repo = await Repository.connect(url, check_schema=True)
    rows: list[tuple[str, int, float]] = []
    try:
        sid = uuid.uuid4().hex

        async def single() -> None:
            for i in range(events):
                call = f"single-{i // 4}"
                await repo.apply(
                    [make_event(sid, call, i)],
                    CallUpdate(session_id=sid, tool_use_id=call, status=CallStatus.RUNNING),
                )

        rows.append(("single event per apply()", events, await timed(events, single)))

        async def batched() -> None:
            for start in range(0, events, batch):
                call = f"batch-{start}"
                evs = [make_event(sid, call, i) for i in range(start, min(events, start + batch))]
                await repo.apply(
                    evs, CallUpdate(session_id=sid, tool_use_id=call, status=CallStatus.RUNNING)
                )

        rows.append((f"batched, {batch} events per apply()", events, await timed(events, batched)))

        async def concurrent() -> None:
            per_task = events // concurrency

            async def worker(w: int) -> None:
                session = f"{sid}-{w}"
                for i in range(per_task):
                    await repo.apply([make_event(session, f"c-{i // 4}", i)])

            await asyncio.gather(*(worker(w) for w in range(concurrency)))

        n = (events // concurrency) * concurrency
        rows.append(
            (
                f"single event per apply(), {concurrency} concurrent sessions",
                n,
                await timed(n, concurrent),
            )
        )
        report = await repo.verify_chain()
        if not report.ok:
            raise SystemExit(f"chain does not verify after the benchmark: {report.first}")
    finally:
        await repo.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Existing PostgreSQL database (default: a throwaway one).")
    parser.add_argument("--admin-url", default=ADMIN, help="Server to create the throwaway db on.")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="A tiny run (checks it works).")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.batch, args.concurrency = 40, 10, 4

    async def go() -> list[tuple[str, int, float]]:
        if args.url:
            return await run(args.url, args.events, args.batch, args.concurrency)
        async with throwaway_db(args.admin_url) as url:
            return await run(url, args.events, args.batch, args.concurrency)

    rows = asyncio.run(go())
    print("| mode | events | events/s |")
    print("|---|---:|---:|")
    for mode, n, rate in rows:
        print(f"| {mode} | {n} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
