"""`parkgate db ...` and `parkgate audit ...` against real databases."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.models import utcnow
from parkgate.rules.budgets import BudgetSpec, charges_for
from parkgate.settings import get_settings
from parkgate.store import Repository
from parkgate.store.migrate import head_revision
from tests.fixtures.db import fresh_sqlite_url
from tests.store.helpers import call_events, finished, uid


@pytest.fixture
def use_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("PARKGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PARKGATE_CONFIG", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def cli(monkeypatch: pytest.MonkeyPatch, url: str, *args: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (it runs its own event loop) against `url`."""
    monkeypatch.setenv("PARKGATE_DATABASE_URL", url)
    get_settings.cache_clear()
    runner = CliRunner()
    result = await asyncio.to_thread(runner.invoke, app, list(args))
    return result.exit_code, result.stdout, result.stderr


async def test_verify_ok_then_tampered(
    repo: Repository, db_url: str, use_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, cid = uid("s"), uid("c")
    await repo.apply(call_events(sid, cid), finished(sid, cid))
    code, out, _ = await cli(monkeypatch, db_url, "audit", "verify")
    assert code == 0 and "OK: 2 events in 1 call chain verified" in out

    victim = (await repo.events_after(sid, 0))[1]
    async with repo.engine.begin() as conn:
        await conn.execute(
            text("UPDATE tool_events SET tool_name = 'shell' WHERE event_id = :e"),
            {"e": victim.event_id},
        )
    code, _, err = await cli(monkeypatch, db_url, "audit", "verify")
    assert code == 1
    assert f"TAMPERED: modified: session {sid} call {cid}, event {victim.event_id}" in err


async def test_export_and_prune(
    repo: Repository,
    db_url: str,
    use_db: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    sid = uid("s")
    for i in range(3):
        await repo.apply(call_events(sid, f"c{i}"), finished(sid, f"c{i}"))
    target = tmp_path / "out.jsonl"
    code, _, err = await cli(
        monkeypatch, db_url, "audit", "export", "--format", "jsonl", "--output", str(target)
    )
    assert code == 0, err
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["tool_use_id"] for line in lines] == ["c0", "c1", "c2"]
    code, out, _ = await cli(monkeypatch, db_url, "audit", "export", "-f", "csv", "-s", sid)
    assert code == 0 and out.splitlines()[0].startswith("id,session_id,tool_use_id")
    assert len(out.splitlines()) == 4

    old = utcnow() - timedelta(days=91)
    # The old call was charged in an hourly budget's window of its day: pruned
    # with it, the window ended and nothing names it any more.
    hourly = {"b": BudgetSpec(limit=5, window="1h")}
    monkeypatch.setenv("PARKGATE_BUDGETS", json.dumps({"b": {"limit": 5, "window": "1h"}}))
    charges = charges_for(hourly, "shell", {}, sid, "p", "k", old)
    await repo.reserve_budgets(sid, "old", charges)
    await repo.apply(call_events(sid, "old"), finished(sid, "old", finished_at=old))
    code, out, _ = await cli(
        monkeypatch, db_url, "audit", "prune", "--older-than", "90d", "--verify"
    )
    assert code == 0 and "pruned 1 finished calls older than 90d" in out
    assert "and 1 ended budget window" in out
    assert await repo.budget_usage([charges[0].key]) == {}
    assert "remaining history verifies" in out
    assert await repo.get_call(sid, "old") is None
    assert await repo.get_call(sid, "c0") is not None
    code, _, err = await cli(monkeypatch, db_url, "audit", "prune", "--older-than", "ninety")
    assert code == 2 and "invalid age" in err and len(err.strip().splitlines()) == 1


async def test_db_upgrade_and_current(
    tmp_path: Path, use_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = fresh_sqlite_url(tmp_path)
    code, out, _ = await cli(monkeypatch, url, "db", "current")
    assert code == 0 and "not migrated" in out
    code, _, err = await cli(monkeypatch, url, "audit", "verify")
    assert code == 1 and "not migrated" in err and "parkgate db upgrade" in err
    code, out, _ = await cli(monkeypatch, url, "db", "upgrade")
    assert code == 0 and f"at revision {head_revision()}" in out
    code, out, _ = await cli(monkeypatch, url, "db", "current")
    assert code == 0 and "up to date" in out
    code, _, err = await cli(monkeypatch, "mysql://nope/x", "db", "upgrade")
    assert code == 2 and "unsupported database URL" in err
