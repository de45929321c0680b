"""The optional phases (throughput, drain, peers, claude_code, command_hook, client,
scale) run for real at smoke size, several phases to a run where they do not interfere (each bench
start costs a dev server and a worker).

Not a timed test: it checks that each phase prints its rows in the table and
the JSON, that nothing was lost or run twice in the multi-worker drains, and
that `--phases peers` without the bench-peers extra is one line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.at_rest import API_ROW, WORKER_ROW
from bench.cli import DEFAULT_PHASES, PHASES
from bench.client_call import CALL_ROW, STEPS
from bench.peers import missing_extra
from bench.scale import INBOX_ROW, LIST_ALL_ROW, LIST_SESSION_ROW, SUM_ROW
from bench.serial_floor import PAIRED_FLOOR_ROW as PAIRED_FLOOR
from tests.bench.test_bench_smoke import _bench, _require_postgres
from tests.fixtures.db import PG_ADMIN_URL


def test_optional_phases_are_not_default() -> None:
    assert set(PHASES) - set(DEFAULT_PHASES) == {"throughput", "drain", "peers", "claude_code",
                                                   "command_hook", "client", "scale"}


@pytest.mark.devserver
@pytest.mark.timeout(300)
async def test_client_and_claude_code_phases_smoke(tmp_path: Path) -> None:
    """Both client paths in one run: each phase times a floor after each of its
    own calls, on its own worker, so their rows carry the ratio to it."""
    out_json = tmp_path / "smoke.json"
    code, out, err = await _bench("--smoke", "--phases", "client,claude_code,command_hook",
                                  "--json", str(out_json))
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    data = json.loads(out_json.read_text())
    assert data["errors"] == []
    table = [line for line in out.splitlines()[2:] if line.startswith("| ")]
    assert len(table) == len(data["rows"])
    _check_client_rows({r["name"]: r for r in data["rows"] if r["section"] == "client"},
                       table)
    _check_hook_rows({r["name"]: r for r in data["rows"] if r["section"] == "claude_code"})
    # The command hook processes (issue 38 item 5): one pre row with the target
    # and one post row per agent.
    command = [r for r in data["rows"] if r["section"] == "command_hook"]
    assert len(command) == 6 and all(r["n"] == 2 and r["p50_ms"] > 0 for r in command)
    assert sum(r["target"] == "p50 ≤ 150 ms" for r in command) == 3


@pytest.mark.devserver
@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_client_phase_profile_smoke(tmp_path: Path) -> None:
    """`--profile` prints where a call's time goes and keeps it in the JSON."""
    out_json = tmp_path / "smoke.json"
    code, out, err = await _bench("--smoke", "--phases", "client", "--profile",
                                  "--json", str(out_json))
    assert code == 0, f"stdout:\n{out}\nstderr:\n{err}"
    [profile] = json.loads(out_json.read_text())["setup"]["profile"]
    assert profile["section"] == "client"
    _check_client_profile(profile, out)


def _check_client_rows(rows: dict[str, Any], table: list[str]) -> None:
    floor = rows[PAIRED_FLOOR]
    assert floor["n"] == 6 and floor["p50_ms"] > 0
    call = rows[CALL_ROW]
    assert call["n"] == 6 and call["p50_ms"] <= call["p95_ms"]
    assert call["x_floor"] == pytest.approx(call["p50_ms"] / floor["p50_ms"])
    assert call["target"] == "p50 ≤ 3x floor" and call["met"] in (True, False)
    assert "requests/call" in call["note"]
    # The gate's submit claims: the claim travels with the release (no claim
    # request). Submit is exactly one request per call; a loaded machine may
    # retry an outcome report (one more request, not a wrong count).
    assert rows[f"step: {STEPS['submit']}"]["n"] == 6
    assert rows[f"step: {STEPS['report_outcome']}"]["n"] >= 6
    assert f"step: {STEPS['claim']}" not in rows
    assert any(f"client: {CALL_ROW}" in line for line in table)


def _check_hook_rows(rows: dict[str, Any]) -> None:
    allow = rows["PreToolUse (Read, allowed by policy) → allow"]
    assert allow["n"] == 2 and allow["p50_ms"] <= allow["p95_ms"]
    assert rows["PostToolUse → outcome recorded"]["n"] == 2
    # The floor is timed after each call, on the phase's own worker.
    floor = rows[PAIRED_FLOOR]
    assert floor["n"] == 2 and floor["p50_ms"] > 0
    assert allow["x_floor"] == pytest.approx(allow["p50_ms"] / floor["p50_ms"])
    assert allow["target"] == "p50 ≤ 1x floor" and allow["met"] in (True, False)


def _check_client_profile(profile: dict[str, Any], out: str) -> None:
    assert profile["calls"] == 6
    durable = profile["durable"]
    assert durable["calls"] == 6 and durable["per_call"]["workflow tasks"] >= 2
    assert durable["activities_per_call"]["parkgate.client_outcome"] == 1
    assert {r["name"] for r in profile["store_methods"]} >= {"get_call", "record_submission"}
    assert any(r["name"] == "start_workflow_execution" for r in profile["temporal_rpcs"])
    assert profile["timeline"] and "### Profile: client" in out
    assert "cpu" in profile  # samples, or why there are none (py-spy missing or not allowed)


def _check_scale_rows(rows: dict[str, Any]) -> None:
    """A worker process and an API process hold the parked calls: their RSS,
    their sum against the target, the inbox and call lists timed, its own floor."""
    floor = rows["floor: empty workflow, eager start (this phase)"]
    assert floor["n"] == 3 and floor["p50_ms"] > 0
    for name in (INBOX_ROW, LIST_SESSION_ROW, LIST_ALL_ROW):
        row = rows[name]
        assert row["n"] == 3 and row["p50_ms"] <= row["p95_ms"]
        assert row["x_floor"] == pytest.approx(row["p50_ms"] / floor["p50_ms"])
        assert row["target"] == "p95 < 200 ms" and row["met"] in (True, False)
    for who in ("worker", "API"):
        assert rows[f"{who} RSS after warm-up (baseline)"]["value"] > 0
        assert rows[f"{who} RSS with 4 parked"]["value"] > 0
    total = rows[SUM_ROW.format(n=4)]
    assert total["value"] == pytest.approx(
        rows["worker RSS with 4 parked"]["value"] + rows["API RSS with 4 parked"]["value"],
        abs=0.2)
    assert total["target"] == "< 400 MB" and total["met"] in (True, False)
    assert rows["dev server RSS with 4 parked (not in the target)"]["target"] is None
    # Each process at rest, before it served anything: RSS and the modules it imported.
    for name in (API_ROW, WORKER_ROW):
        assert rows[name]["value"] > 0 and "modules imported" in rows[name]["note"]
        assert int(rows[name]["note"].split()[0]) > 100
    assert rows[API_ROW]["target"] == "< 100 MB" and rows[API_ROW]["met"] in (True, False)


@pytest.mark.slow
@pytest.mark.devserver
@pytest.mark.postgres
@pytest.mark.timeout(300)
async def test_throughput_drain_scale_and_peers_smoke(tmp_path: Path) -> None:
    """The phases that run worker processes, in one run (one bench start)."""
    await _require_postgres()
    phases = "throughput,drain,scale" + ("" if missing_extra() else ",peers")
    out_json = tmp_path / "smoke.json"
    code, out, err = await _bench("--smoke", "--phases", phases, "--parked", "4",
                                  "--scale-requests", "3", "--json", str(out_json),
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
    _check_scale_rows({r["name"]: r for r in rows if r["section"] == "scale"})

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
