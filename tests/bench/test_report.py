"""The table and the JSON are two renderings of the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.report import HEADER, Machine, Report, Row, percentile


def test_percentile_is_inclusive_and_ordered() -> None:
    samples = [float(v) for v in range(1, 101)]
    assert percentile(samples, 50) == pytest.approx(50.5)
    assert percentile(samples, 95) == pytest.approx(95.05)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0


def test_latency_row_has_percentiles_and_throughput() -> None:
    row = Row.latency("latency", "x", [10.0, 20.0, 30.0, 40.0], concurrency=2, wall_s=0.5)
    assert row.n == 4 and row.per_s == 8.0
    assert row.p50_ms is not None and row.p95_ms is not None and row.p99_ms is not None
    assert row.p50_ms == pytest.approx(25.0)
    assert row.p50_ms <= row.p95_ms <= row.p99_ms <= 40.0


def test_markdown_and_json_agree(tmp_path: Path) -> None:
    report = Report(machine=Machine.here(), command="python -m bench --smoke")
    report.add(Row.latency("latency", "floor", [1.0, 2.0], concurrency=1, wall_s=0.01))
    report.add(Row("parked", "worker RSS growth", value=12.5, unit="MB", target="< 200 MB",
                   met=True))
    report.add(Row("parked", "lost", value=1, unit="calls", target="0", met=False))
    lines = report.markdown().splitlines()
    assert lines[0] == HEADER
    assert len(lines) == 2 + 3
    cores = report.machine.cores
    assert all(f"{cores} cores; absolute times depend on the machine" in line
               for line in lines[2:])
    assert "| 12.5 MB |" in lines[3] and "| yes |" in lines[3]
    assert "**NO**" in lines[4]
    assert not report.targets_met
    path = tmp_path / "out.json"
    report.write_json(path)
    data = json.loads(path.read_text())
    assert [r["name"] for r in data["rows"]] == ["floor", "worker RSS growth", "lost"]
    assert data["rows"][0]["machine"] == f"{cores} cores"
    assert data["machine"]["cores"] == cores and data["targets_met"] is False


def test_the_scale_phase_reads_the_serial_floor_of_the_same_run() -> None:
    from bench.serial_floor import serial_floor_p50

    report = Report(machine=Machine.here(), command="python -m bench")
    assert serial_floor_p50(report) is None  # latency phase not run: no ratio, no verdict
    report.add(Row.latency("latency", "floor: empty workflow, eager start", [30.0] * 3,
                           concurrency=32))
    report.add(Row.latency("latency", "floor: empty workflow, eager start", [12.0] * 3,
                           concurrency=1))
    report.add(Row.latency("latency", "durable read_file", [20.0] * 3, concurrency=1))
    assert serial_floor_p50(report) == pytest.approx(12.0)
