"""Export calls for audit: JSON Lines (one call per line, with its events) or CSV.

CSV has one row per call; structured columns (input, result, full_output)
hold canonical JSON (RFC 8785, parkgate.jcs), and `event_count` replaces the
nested events. JSON Lines keep each number as it is stored (`1.0` stays `1.0`):
an event hashed before RFC 8785 hashed Python's spelling of its numbers, and
`parkgate audit verify-export` recomputes either form from the file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Literal

from parkgate import jcs
from parkgate.store.results import CallFilters
from parkgate.store.statements import CALLS

if TYPE_CHECKING:
    from parkgate.store.call_store import CallStore

#: Progress callback: (calls written so far, total calls matching).
Progress = Callable[[int, int], None]

#: A call's columns in the table's order: the export's format does not move
#: when the models that read the row are reorganised.
ROW_COLUMNS: tuple[str, ...] = tuple(column.name for column in CALLS.columns)
#: `decider`: who decided as listings show it (`alice (unverified)` for a name
#: typed on a generic link, whose `decided_by` is empty).
CSV_COLUMNS: tuple[str, ...] = (*ROW_COLUMNS, "decider", "event_count")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return jcs.canonical_text(value)
    return value


async def export_calls(
    repo: CallStore,
    fmt: Literal["jsonl", "csv"],
    out: IO[str],
    filters: CallFilters | None = None,
    *,
    include_events: bool = True,
    on_progress: Progress | None = None,
) -> int:
    """Stream matching calls to `out`; returns how many were written."""
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"unknown export format {fmt!r} (use jsonl or csv)")
    total = await repo.count_calls(filters) if on_progress else 0
    writer: Any = None
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
        writer.writeheader()
    written = 0
    async for batch in repo.iter_calls(filters):
        keys = [(c.session_id, c.tool_use_id) for c in batch]
        events = await repo.events_for_calls(keys) if (include_events or fmt == "csv") else {}
        for call in batch:
            dumped = call.model_dump(mode="json")
            row = {name: dumped[name] for name in ROW_COLUMNS}
            row["decider"] = call.decider()
            call_events = events.get((call.session_id, call.tool_use_id), [])
            if fmt == "jsonl":
                if include_events:
                    row["events"] = [e.model_dump(mode="json") for e in call_events]
                out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
            else:
                row["event_count"] = len(call_events)
                writer.writerow({k: _csv_cell(row.get(k)) for k in CSV_COLUMNS})
            written += 1
        if on_progress:
            on_progress(written, max(total, written))
    out.flush()
    return written
