"""`python -m bench --smoke` runs every phase for real (tiny sizes) and writes
the same figures to stdout (Markdown) and JSON. Not a timed test: only that
the benchmark works, nothing was lost or run twice, and the outputs agree."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.fixtures.db import PG_ADMIN_URL, postgres_unavailable

ROOT = Path(__file__).resolve().parents[2]
HEADER = (
    "| # | measurement | conc. | n | p50 ms | p95 ms | p99 ms | per s | value "
    "| x floor (p50) | x in-process (p50) | target | met | machine |"
)


async def _bench(*args: str, timeout: float = 280) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench", *args,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _require_postgres() -> None:
    try:
        conn = await asyncpg.connect(PG_ADMIN_URL, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        postgres_unavailable(str(exc))
    else:
        await conn.close()


@pytest.mark.slow
@pytest.mark.devserver
@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_smoke_run_writes_matching_table_and_json(tmp_path: Path) -> None:
    await _require_postgres()
    out_json = tmp_path / "smoke.json"
    code, out, err = await _bench("--smoke", "--json", str(out_json),
                                  "--pg-admin-url", PG_ADMIN_URL)
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"

    lines = out.splitlines()
    assert lines[0] == HEADER
    table = [line for line in lines[2:] if line.startswith("| ")]
    data = json.loads(out_json.read_text())
    rows = data["rows"]
    assert data["errors"] == []
    assert len(table) == len(rows) > 0
    cores = data["machine"]["cores"]
    assert cores >= 1
    for line, row in zip(table, rows, strict=True):
        assert f"{row['section']}: {row['name']}" in line
        assert line.rstrip(" |").endswith(f"{cores} cores; absolute times depend on the machine")
        assert row["machine"] == f"{cores} cores"

    by_name = {(r["section"], r["name"], r["concurrency"]): r for r in rows}
    sections = {r["section"] for r in rows}
    assert sections == {"latency", "approval", "parked", "history"}
    # Latency: floor, in-process and durable at both smoke concurrency levels, with ratios.
    for c in (1, 4):
        floor = by_name[("latency", "floor: empty workflow, eager start", c)]
        assert floor["n"] >= 6 and floor["p50_ms"] > 0 and floor["per_s"] > 0
        for tool in ("read_file", "write_file"):
            durable = by_name[("latency", f"durable {tool} (DurableDispatcher, eager)", c)]
            assert durable["x_floor"] == pytest.approx(durable["p50_ms"] / floor["p50_ms"])
            assert durable["x_inprocess"] > 1
            assert durable["met"] in (True, False)
            assert durable["p50_ms"] <= durable["p95_ms"] <= durable["p99_ms"]
    trip = by_name[("approval", "decision POST → agent's long-poll returns 200", 1)]
    assert trip["n"] == 2 and trip["p50_ms"] > 0
    parked = {r["name"]: r for r in rows if r["section"] == "parked"}
    assert parked["lost (no result, event or file)"]["value"] == 0
    assert parked["ran twice (events or execute attempts)"]["value"] == 0
    assert parked["history hash chain verifies"]["met"] is True
    growth = parked["worker RSS growth for 10 parked"]
    assert growth["unit"] == "MB" and growth["target"] == "< 200 MB"
    drain = next(r for n, r in parked.items() if n.startswith("drain:"))
    assert drain["n"] == 10 and drain["per_s"] > 0
    history = [r for r in rows if r["section"] == "history"]
    assert len(history) == 3 and all(r["per_s"] > 0 for r in history)
    assert data["command"].startswith("python -m bench --smoke")


async def test_bad_arguments_exit_2_with_one_line() -> None:
    code, out, err = await _bench("--concurrency", "1,zero", timeout=60)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "expected integers like 1,32" in err
    code, _, err = await _bench("--phases", "latency,nope", timeout=60)
    assert code == 2 and "unknown phase 'nope'" in err
