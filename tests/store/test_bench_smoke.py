"""bench/history_inserts.py --smoke runs and prints its Markdown table."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from parkgate.store import Repository

BENCH = Path(__file__).resolve().parents[2] / "bench" / "history_inserts.py"


async def test_bench_smoke(pg_repo: Repository, pg_url: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(BENCH),
        "--smoke",
        "--url",
        pg_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "| mode | events | events/s |"
    assert len(lines) == 5 and all(line.startswith("| ") for line in lines[2:])
    assert (await pg_repo.verify_chain()).ok
