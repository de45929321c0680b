"""What consulting remembered decisions adds to classifying a call that would
park: `remembered_verdict` (session lookup + indexed rule query + matching)
with N stored rules (SQLite, or PostgreSQL with PARKGATE_BENCH_PG_URL).

Only calls that policy would park pay it; auto and denied calls never query.
Run: `python -m bench.remembered_lookup`.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from datetime import timedelta

from parkgate.activities.classify import remembered_verdict
from parkgate.models import Session, SideEffects, ToolDefinition, ToolUseBlock, input_hash, utcnow
from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.remembered import rule_for
from parkgate.store.migrate import upgrade_async
from parkgate.store.repository import Repository
from parkgate.verdicts import ApprovalInfo, Execute, NeedsApproval, PreparedCall

SIZES = (0, 100, 1000, 10000)
REPEATS = 50
TOOLS = ("shell", "write_file", "patch_file", "fetch")


async def _fill(repo: Repository, sid: str, start: int, stop: int) -> None:
    now = utcnow()
    for i in range(start, stop):
        tool = TOOLS[i % len(TOOLS)]
        tool_input = {"command": f"make target{i}"} if tool == "shell" else {"path": f"f{i}"}
        await repo.save_remembered(rule_for(
            RememberSpec(scope="session" if i % 2 else "workspace", ttl_seconds=3600),
            request_id=uuid.uuid4().hex, project="default",
            session_id=sid if i % 3 == 0 else f"other-{i % 50}", workspace_path="/ws",
            tool_name=tool, tool_input=tool_input, decided_at=now - timedelta(seconds=1),
            created_by="bench", principal_id="key:bench", approver=None))


def _parked(session: Session, command: str) -> NeedsApproval:
    call = ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:8]}", name="shell",
                        input={"command": command})
    definition = ToolDefinition(name="shell", description="", input_schema={"type": "object"},
                                side_effects=SideEffects.EXECUTE)
    digest = input_hash("shell", call.input)
    prepared = PreparedCall(call=call, session=session, definition=definition,
                            input_hash=digest, rule="default.EXECUTE=prompt")
    info = ApprovalInfo(request_id=uuid.uuid4().hex, tool_name="shell", tool_use_id=call.id,
                        input_summary=command, side_effects=SideEffects.EXECUTE,
                        rule=prepared.rule, input_hash=digest)
    return NeedsApproval(prepared=prepared, info=info)


async def _measure(url: str) -> list[tuple[int, float, float, bool]]:
    await upgrade_async(url)
    repo = await Repository.connect(url)
    sid = f"bench-{uuid.uuid4().hex[:8]}"
    await repo.register_session(sid, "/ws")
    session = Session(session_id=sid, turn_id="t1", workspace_path="/ws")
    rows: list[tuple[int, float, float, bool]] = []
    filled = 0
    try:
        for size in SIZES:
            await _fill(repo, sid, filled, size)
            filled = size
            times: list[float] = []
            hit = False
            for n in range(REPEATS):
                verdict = _parked(session, "make target0 -j4" if n % 2 else "rm -rf build")
                t0 = time.perf_counter()
                out = await remembered_verdict(repo, verdict, session)
                times.append((time.perf_counter() - t0) * 1000)
                hit = hit or isinstance(out, Execute)
            times.sort()
            rows.append((size, statistics.median(times), times[int(len(times) * .95) - 1], hit))
    finally:
        await repo.close()
    return rows


def main() -> None:
    url = os.environ.get("PARKGATE_BENCH_PG_URL") or (
        f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/remembered-bench.db")
    rows = asyncio.run(_measure(url))
    print(f"remembered_verdict on {url.split(':', 1)[0]} ({REPEATS} lookups each)")
    print(f"{'rules':>7} {'p50 ms':>8} {'p95 ms':>8} {'matched':>8}")
    for size, p50, p95, hit in rows:
        print(f"{size:>7} {p50:>8.2f} {p95:>8.2f} {hit!s:>8}")


if __name__ == "__main__":
    main()
