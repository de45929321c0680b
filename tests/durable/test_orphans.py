"""Calls whose workflow is ended from outside parkgate get an honest end (dev server).

`temporal workflow terminate` on a parked call, or on a client call that its
client has claimed, used to leave the row `parked`/`claimed` for ever, with its
budget reservation held. The worker's orphan sweep records the end: `failed`
(it never ran, the reservation is given back) or `outcome_unknown` (it may
have run), with a tool.failed event naming the terminate's reason and identity;
a call that ended normally is left alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus

from parkgate.calls.records import CallStatus
from parkgate.durable.orphans import OrphanSweep, close_of, sweeping_orphans
from parkgate.durable.payloads import call_workflow_id
from parkgate.models import ToolErrorClass
from parkgate.runtime.devserver import DevServer
from parkgate.store.budget_store import RELEASED
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.client_tools.test_client_calls import register as register_with_client_tools
from tests.fixtures.temporal import dev_client

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

WRITES = {"writes": {"limit": 1, "tools": ["write_file"]}}
#: The sweep every half second (it shares the stuck-task sweep's interval).
FAST = {"stuck_task_check_seconds": 0.5}


@pytest.fixture(scope="module")
async def temporal(dev_server: DevServer) -> Client:
    return await dev_client(dev_server)


@pytest.fixture
async def api(temporal: Client, pg_repo: Repository, tmp_path: Path) -> AsyncIterator[ApiRig]:
    async with api_rig(temporal, pg_repo, tmp_path, budgets=WRITES,
                       policy={"default": {"WRITE": "prompt"}}, **FAST) as rig:
        yield rig


async def ended(api: ApiRig, sid: str, cid: str) -> Any:
    for _ in range(300):
        row = await api.repo.get_call(sid, cid)
        if row is not None and row.status.terminal:
            return row
        await asyncio.sleep(0.1)
    raise AssertionError(f"{sid}/{cid} never ended")


async def terminate(api: ApiRig, sid: str, cid: str, reason: str) -> None:
    handle = api.rig.client.get_workflow_handle(call_workflow_id(sid, cid))
    await handle.terminate(reason=reason)
    assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED


async def test_a_parked_call_terminated_by_hand_ends_failed_and_gives_its_budget_back(
    api: ApiRig,
) -> None:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": "a.txt", "content": "a"}, call_id="c1")
    await api.wait_parked(sid, "c1")
    (charge,) = await api.repo.call_charges(sid, "c1")
    assert charge.used_now == charge.amount  # the parked call holds the unit
    await terminate(api, sid, "c1", "cleaning up by hand")

    async with sweeping_orphans(api.rig.client, api.rig.settings, api.repo) as sweep:
        assert sweep is not None
        row = await ended(api, sid, "c1")
    assert row.status == CallStatus.FAILED and row.error_class == ToolErrorClass.EXECUTION_ERROR
    assert row.result is not None and row.result.is_error
    assert "did not run" in row.result.text and "cleaning up by hand" in row.result.text
    assert not (api.workspace / "a.txt").exists()
    (charge,) = await api.repo.call_charges(sid, "c1")
    assert charge.state == RELEASED and charge.used_now == 0
    [event] = [e for e in await api.repo.call_events(sid, "c1") if e.type == "tool.failed"]
    assert event.data["ended_by"] == "orphan_sweep" and event.data["may_have_run"] is False
    assert event.data["workflow"]["closed"] == "terminated"
    assert event.data["workflow"]["reason"] == "cleaning up by hand"
    assert event.data["workflow"]["identity"]  # who sent the terminate
    assert (await api.repo.verify_chain(sid)).ok
    # The API answers the call as ended, and the inbox no longer offers it.
    got = await api.http.get(f"/v1/sessions/{sid}/tool-calls/c1")
    assert got.status_code == 200 and got.json()["status"] == "failed", got.text
    assert not [w for w in await api.repo.waiting_approvals(session_id=sid)
                if w.status is not None and not w.status.terminal]


async def test_a_claimed_client_call_terminated_by_hand_may_have_run(api: ApiRig) -> None:
    sid = await register_with_client_tools(api)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls",
                            params={"wait": 30, "claim": "true"},
                            json={"id": "toolu_k", "name": "lookup", "input": {"q": "x"}})
    assert r.status_code == 202 and r.json()["status"] == "claimed", r.text
    started = await api.http.post(f"/v1/sessions/{sid}/tool-calls/toolu_k/start",
                                  json={"claim_id": r.json()["claim_id"]})
    assert started.status_code == 200, started.text
    await terminate(api, sid, "toolu_k", "operator reset")

    sweep = OrphanSweep(api.rig.client, api.rig.settings, api.repo)
    found: list[Any] = []
    for _ in range(50):  # visibility is written a moment after the close
        found = await sweep.sweep()
        if found:
            break
        sweep.since = sweep.since.replace(year=sweep.since.year - 1)  # look again
        await asyncio.sleep(0.2)
    assert [o.workflow_id for o in found] == [call_workflow_id(sid, "toolu_k")]
    row = await api.repo.get_call(sid, "toolu_k")
    assert row is not None and row.status == CallStatus.OUTCOME_UNKNOWN
    assert row.result is not None and "may have run" in row.result.text
    # A second pass over the same window records nothing again.
    sweep.since = sweep.since.replace(year=sweep.since.year - 1)
    assert await sweep.sweep() == []
    failed = [e for e in await api.repo.call_events(sid, "toolu_k") if e.type == "tool.failed"]
    assert len(failed) == 1 and failed[0].data["may_have_run"] is True


async def test_calls_that_ended_normally_are_left_alone(api: ApiRig) -> None:
    sid = await api.register()
    await api.submit(sid, "list_dir", {"path": "."}, call_id="r1")
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/r1", params={"wait": 30})
    assert r.json()["status"] == "succeeded", r.text
    before = await api.repo.call_events(sid, "r1")
    sweep = OrphanSweep(api.rig.client, api.rig.settings, api.repo)
    assert call_workflow_id(sid, "r1") not in [o.workflow_id for o in await sweep.sweep()]
    assert await api.repo.call_events(sid, "r1") == before


def test_the_close_is_read_from_the_last_event_or_the_visibility_status() -> None:
    terminated = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED)
    terminated.workflow_execution_terminated_event_attributes.reason = "stop"
    terminated.workflow_execution_terminated_event_attributes.identity = "ops@host"
    assert close_of(terminated, None).status == "terminated"
    assert close_of(terminated, None).identity == "ops@host"
    timed_out = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT)
    assert close_of(timed_out, None).status == "timed_out"
    failed = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED)
    failed.workflow_execution_failed_event_attributes.failure.message = "boom"
    assert close_of(failed, None).reason == "boom"
    gone = close_of(None, WorkflowExecutionStatus.TERMINATED)
    assert gone.status == "terminated" and "terminated" in gone.reason
