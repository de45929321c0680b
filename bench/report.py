"""Rows of the benchmark table: statistics, the Markdown rendering and the JSON.

Every figure lands in a `Row`; the Markdown table and the JSON file are two
renderings of the same rows, so they cannot disagree. Each row carries the
machine it was measured on: absolute times depend on it, ratios much less.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

MACHINE_NOTE = "absolute times depend on the machine; ratios are the headline"


@dataclass(frozen=True)
class Machine:
    """Where the figures were taken (so a reader can scale absolute times)."""

    cores: int
    cpu: str
    memory_gb: float
    python: str
    system: str
    load_at_start: tuple[float, float, float]

    @classmethod
    def here(cls) -> Machine:
        load = os.getloadavg()
        return cls(
            cores=os.cpu_count() or 1,
            cpu=_cpu_model(),
            memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
            python=platform.python_version(),
            system=f"{platform.system()} {platform.release()}",
            load_at_start=(round(load[0], 2), round(load[1], 2), round(load[2], 2)),
        )

    @property
    def label(self) -> str:
        return f"{self.cores} cores"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def percentile(samples: list[float], pct: int) -> float:
    """Inclusive percentile (1..99) of a non-empty sample list."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[pct - 1]


@dataclass
class Row:
    """One line of the table. Unused cells stay None (rendered as a dash)."""

    section: str
    name: str
    concurrency: int | None = None
    n: int | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    per_s: float | None = None
    value: float | None = None
    unit: str | None = None
    x_floor: float | None = None
    x_inprocess: float | None = None
    target: str | None = None
    met: bool | None = None
    note: str = ""
    machine: str = ""

    @classmethod
    def latency(
        cls,
        section: str,
        name: str,
        samples_ms: list[float],
        *,
        concurrency: int | None = None,
        wall_s: float | None = None,
        **extra: Any,
    ) -> Row:
        """A row from per-call latencies (ms) and the wall time they took."""
        return cls(
            section=section,
            name=name,
            concurrency=concurrency,
            n=len(samples_ms),
            p50_ms=percentile(samples_ms, 50),
            p95_ms=percentile(samples_ms, 95),
            p99_ms=percentile(samples_ms, 99),
            per_s=len(samples_ms) / wall_s if wall_s else None,
            **extra,
        )


@dataclass
class Report:
    """The whole run: machine, setup, rows, and the command that reproduces it."""

    machine: Machine
    command: str
    setup: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    finished_at: str | None = None

    def add(self, row: Row) -> Row:
        row.machine = self.machine.label
        self.rows.append(row)
        return row

    @property
    def targets_met(self) -> bool:
        return all(r.met is not False for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": asdict(self.machine),
            "note": MACHINE_NOTE,
            "command": self.command,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "setup": self.setup,
            "targets_met": self.targets_met,
            "errors": self.errors,
            "rows": [asdict(r) for r in self.rows],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")

    def markdown(self) -> str:
        return render_markdown(self.rows)


HEADER = (
    "| # | measurement | conc. | n | p50 ms | p95 ms | p99 ms | per s | value "
    "| x floor (p50) | x in-process (p50) | target | met | machine |"
)
ALIGN = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"


def render_markdown(rows: list[Row]) -> str:
    """The table: one line per row, a dash where a cell does not apply."""
    lines = [HEADER, ALIGN]
    for i, r in enumerate(rows, 1):
        value = "-" if r.value is None else f"{_num(r.value)} {r.unit or ''}".strip()
        met = "-" if r.met is None else ("yes" if r.met else "**NO**")
        name = f"{r.section}: {r.name}" + (f" ({r.note})" if r.note else "")
        cells = [
            str(i),
            name,
            _cell(r.concurrency),
            _cell(r.n),
            _cell(r.p50_ms),
            _cell(r.p95_ms),
            _cell(r.p99_ms),
            _cell(r.per_s),
            value,
            _ratio(r.x_floor),
            _ratio(r.x_inprocess),
            r.target or "-",
            met,
            f"{r.machine}; {MACHINE_NOTE.split(';')[0]}",
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _num(value: float) -> str:
    if value == int(value) and abs(value) < 1e6:
        return f"{int(value):,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(value: float | int | None) -> str:
    return "-" if value is None else _num(float(value))


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
