"""bench.payload_sizes measures what it says: ids + facts are smaller than rows,
by about the input's size."""

from __future__ import annotations

from pathlib import Path

from bench.payload_sizes import _rows


async def test_ids_and_facts_are_smaller_than_rows_by_about_the_input(tmp_path: Path) -> None:
    rows = await _rows(4096, tmp_path)
    assert [name for name, _, _ in rows] == ["classify", "create_approval", "execute"]
    for name, old, new in rows:
        assert old - new >= 4096, (name, old, new)
