"""The periodic report of calls open too long (issue 37), over the real store."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from parkgate.durable.open_calls import report_once, reporting_open_calls
from parkgate.settings import Settings
from parkgate.store import CallStatus, CallUpdate, Repository


async def _call(repo: Repository, session: str, tool_use_id: str, status: CallStatus) -> None:
    await repo.update_call(CallUpdate(session_id=session, tool_use_id=tool_use_id,
                                      turn_id="t", tool_name="write_file", status=status))


async def test_a_report_names_the_open_calls_and_only_those(repo: Repository) -> None:
    session = f"open-{uuid.uuid4().hex[:8]}"
    await _call(repo, session, "tu_parked", CallStatus.PARKED)
    await _call(repo, session, "tu_done", CallStatus.SUCCEEDED)
    # Nothing has been open for an hour.
    assert await report_once(repo, 3600.0) is None
    await asyncio.sleep(0.01)
    line = await report_once(repo, 0.001)
    assert line is not None
    assert f"{session}/tu_parked (write_file, parked, open 0m)" in line
    assert "tu_done" not in line
    assert "parkgate calls list --open-longer-than 0" in line


async def test_the_worker_loop_logs_a_warning_each_interval(
    sqlite_repo: Repository, caplog: pytest.LogCaptureFixture,
) -> None:
    session = f"open-{uuid.uuid4().hex[:8]}"
    await _call(sqlite_repo, session, "tu_waiting", CallStatus.RELEASED)
    settings = Settings(open_call_report_interval_seconds=0.05, open_call_report_seconds=0.001)
    with caplog.at_level(logging.WARNING, logger="parkgate.open_calls"):
        async with reporting_open_calls(settings, sqlite_repo):
            await asyncio.sleep(0.4)
    reports = [r.getMessage() for r in caplog.records if r.name == "parkgate.open_calls"]
    assert len(reports) >= 2, reports
    assert all(f"{session}/tu_waiting" in r for r in reports)


async def test_an_interval_of_zero_reports_nothing(
    sqlite_repo: Repository, caplog: pytest.LogCaptureFixture,
) -> None:
    await _call(sqlite_repo, f"open-{uuid.uuid4().hex[:8]}", "tu_x", CallStatus.PARKED)
    settings = Settings(open_call_report_interval_seconds=0, open_call_report_seconds=0.001)
    with caplog.at_level(logging.WARNING, logger="parkgate.open_calls"):
        async with reporting_open_calls(settings, sqlite_repo):
            await asyncio.sleep(0.2)
    assert not [r for r in caplog.records if r.name == "parkgate.open_calls"]
