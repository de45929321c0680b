"""What one inbox render / one SSE poll costs: `waiting_for` over N pending
approval requests (SQLite, or PostgreSQL with PARKGATE_BENCH_PG_URL).

The inbox page and each open inbox stream run `waiting_for` (one joined
query, then one submitter lookup per candidate) once per render and once per
poll (`sse_poll_seconds`). Run: `python -m bench.inbox_query`.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from parkgate.api.people.inbox import Filters, Viewer, waiting_for
from parkgate.approvals.access import Principal
from parkgate.calls.records import ApprovalRecord
from parkgate.models import utcnow
from parkgate.settings import Settings
from parkgate.store.migrate import upgrade_async
from parkgate.store.repository import Repository

SIZES = (10, 100, 1000)
REPEATS = 20


async def _fill(repo: Repository, count: int) -> None:
    sid = f"bench-{uuid.uuid4().hex[:8]}"
    await repo.register_session(sid, "/tmp")
    now = utcnow()
    for i in range(count):
        await repo.save_approval(ApprovalRecord(
            request_id=uuid.uuid4().hex, session_id=sid, turn_id="t1",
            tool_use_id=f"toolu_{i}", tool_name="write_file", token_hash=uuid.uuid4().hex,
            input_hash="h", requested_at=now - timedelta(seconds=i),
            expires_at=now + timedelta(hours=1),
            info={"side_effects": "write", "rule": "bench"},
        ))


async def _measure(url: str) -> list[tuple[int, int, float, float]]:
    await upgrade_async(url)
    repo = await Repository.connect(url)
    settings = Settings(data_dir=Path(tempfile.mkdtemp()))
    viewer = Viewer(principal=Principal(key_id="k", name="bench", roles=["approver"]))
    rows: list[tuple[int, int, float, float]] = []
    filled = 0
    try:
        for size in SIZES:
            await _fill(repo, size - filled)
            filled = size
            times = []
            shown = 0
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                shown = len(await waiting_for(repo, settings, viewer, Filters(), utcnow()))
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            rows.append((size, shown, statistics.median(times), times[int(len(times) * .95) - 1]))
    finally:
        await repo.close()
    return rows


def main() -> None:
    url = os.environ.get("PARKGATE_BENCH_PG_URL") or (
        f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/inbox-bench.db")
    rows = asyncio.run(_measure(url))
    print(f"inbox waiting_for on {url.split(':', 1)[0]} ({REPEATS} runs each)")
    print(f"{'pending':>8} {'listed':>7} {'p50 ms':>8} {'p95 ms':>8}")
    for size, shown, p50, p95 in rows:
        print(f"{size:>8} {shown:>7} {p50:>8.1f} {p95:>8.1f}")


if __name__ == "__main__":
    main()
