"""The optional phases (throughput, drain, peers) run for real at smoke size.

Not a timed test: it checks that each phase prints its rows in the table and
the JSON, that nothing was lost or run twice in the multi-worker drains, and
that `--phases peers` without the bench-peers extra is one line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import DEFAULT_PHASES, PHASES
from bench.peers import missing_extra
from tests.bench.test_bench_smoke import _bench, _require_postgres
from tests.fixtures.db import PG_ADMIN_URL


def test_optional_phases_are_not_default() -> None:
    assert set(PHASES) - set(DEFAULT_PHASES) == {"throughput", "drain", "peers"}


@pytest.mark.devserver
@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_throughput_drain_and_peers_smoke(tmp_path: Path) -> None:
    await _require_postgres()
    phases = "throughput,drain" + ("" if missing_extra() else ",peers")
    out_json = tmp_path / "smoke.json"
    code, out, err = await _bench("--smoke", "--phases", phases, "--json", str(out_json),
                                  "--pg-admin-url", PG_ADMIN_URL)
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    data = json.loads(out_json.read_text())
    assert data["errors"] == []
    rows = data["rows"]
    table = [line for line in out.splitlines()[2:] if line.startswith("| ")]
    assert len(table) == len(rows)

    tput = [r for r in rows if r["section"] == "throughput"]
    for k, plural in ((1, ""), (2, "es")):
        names = {r["name"] for r in tput}
        assert f"floor: empty workflow, client start, {k} worker process{plural}" in names
        read = next(r for r in tput if r["name"].startswith("http read_file")
                    and r["name"].endswith(f"{k} worker process{plural}"))
        assert read["concurrency"] == 4 and read["per_s"] > 0
        assert read["note"].count("worker ") == k and "dev server" in read["note"]
    drains = [r for r in rows if r["section"] == "drain" and r["name"].startswith("drain with")]
    assert [r["name"].split(":")[0] for r in drains] == [
        "drain with 1 worker process", "drain with 2 worker processes"]
    assert all(r["n"] == 6 and r["per_s"] > 0 for r in drains)
    integrity = [r for r in rows if r["section"] == "drain" and r["name"].startswith("lost")]
    assert len(integrity) == 2 and all(r["value"] == 0 and r["met"] for r in integrity)

    if "peers" in phases:
        peers = {(r["name"], r["concurrency"]): r for r in rows if r["section"] == "peers"}
        for system in ("parkgate (DurableDispatcher, eager)", "LangGraph + PostgresSaver",
                       "DBOS (PostgreSQL system DB)"):
            for c in (1, 4):
                assert peers[(f"{system}: auto read_file", c)]["per_s"] > 0
        approvals = [r for r in peers.values() if "approval → result" in r["name"]]
        assert len(approvals) == 3 and all(r["n"] == 2 and r["p50_ms"] > 0 for r in approvals)


async def test_peers_without_the_extra_is_one_line(tmp_path: Path) -> None:
    if not missing_extra():
        pytest.skip("parkgate[bench-peers] is installed here")
    code, out, err = await _bench("--phases", "peers", timeout=60)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "parkgate[bench-peers]" in err
