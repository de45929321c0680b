"""Phase 4: event inserts per second into the history store on PostgreSQL.

Reuses bench/history_inserts.py (the store engineer's benchmark): a throwaway
database on the server at `admin_url`, migrated, then Repository.apply()
timed single, batched and from concurrent sessions; the hash chain must verify.
"""

from __future__ import annotations

from bench.history_inserts import run as run_inserts
from bench.history_inserts import throwaway_db
from bench.progress import Reporter
from bench.report import Report, Row


async def run(
    report: Report, ui: Reporter, *, admin_url: str, events: int, batch: int, concurrency: int
) -> None:
    ui.say(f"history: {events} events per mode on PostgreSQL")
    async with throwaway_db(admin_url) as url:
        rows = await run_inserts(url, events, batch, concurrency)
    for mode, n, rate in rows:
        report.add(Row("history", f"PostgreSQL inserts, {mode}", n=n, per_s=rate,
                       note="per s = events/s"))
