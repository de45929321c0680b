"""Calls whose workflow task cannot heal end with a clear error (dev server).

A call started under a payload key the worker does not have, or with an input
that does not convert to the workflow's model, fails its workflow task on
every attempt. The task healer ends such a call (status failed, the reason in
its tool.failed event); a cancel ends one at once (status cancelled); a task
that fails once and then succeeds is left alone.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowExecutionStatus

from parkgate.api.shared.service import CallService
from parkgate.calls.records import CallStatus
from parkgate.durable.codec import CodecError, EncryptionCodec, decode_key
from parkgate.durable.converter import converter_with
from parkgate.durable.payloads import CALL_WORKFLOW, CallInput, call_workflow_id
from parkgate.durable.stuck import TaskHealer, TaskTrouble, assess, diagnose, healing
from parkgate.models import Session, ToolErrorClass, ToolUseBlock
from parkgate.runtime.devserver import DevServer
from parkgate.settings import Settings
from tests.fixtures.temporal import (
    TEST_PAYLOAD_KEY_ID,
    TEST_PAYLOAD_KEYS,
    dev_client,
    durable_rig,
)

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

#: Fast healer for tests: check twice a second, end after two failed attempts,
#: check every running call of the queue (the server's flag comes later).
FAST = {
    "stuck_task_check_seconds": 0.5,
    "stuck_task_failures": 2,
    "stuck_task_flagged_only": False,
}


async def foreign_client(server: DevServer) -> Client:
    """A client whose codec encrypts under a key id no worker has."""
    codec = EncryptionCodec({"retired-key": os.urandom(32)}, "retired-key")
    return await Client.connect(server.address, data_converter=converter_with(codec))


async def start_raw(client: Client, session: Session, tool_use_id: str, arg: Any,
                    task_queue: str) -> str:
    workflow_id = call_workflow_id(session.session_id, tool_use_id)
    await client.start_workflow(CALL_WORKFLOW, arg, id=workflow_id, task_queue=task_queue)
    return workflow_id


async def until(check: Any, what: str, tries: int = 600, pause: float = 0.1) -> Any:
    """Poll `check()` until it returns something truthy (a bound, not a timing)."""
    for _ in range(tries):
        value = await check()
        if value:
            return value
        await asyncio.sleep(pause)
    raise AssertionError(f"never happened: {what}")


async def test_undecodable_input_ends_the_call_with_the_reason_in_the_audit(
    dev_server: DevServer, pg_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    foreign = await foreign_client(dev_server)
    async with durable_rig(client, pg_repo, tmp_path, **FAST) as rig:
        session = rig.session("s-stuck")
        call = ToolUseBlock(id="tu_key", name="read_file", input={"path": "a.txt"})
        workflow_id = await start_raw(
            foreign, session, call.id, CallInput(call=call, session=session),
            rig.settings.temporal_task_queue,
        )
        async with healing(client, rig.settings, pg_repo) as healer:
            assert healer is not None

            async def finished() -> Any:
                row = await pg_repo.get_call(session.session_id, call.id)
                return row if row is not None and row.status.terminal else None

            row = await until(finished, "the healer ends the call")
        assert row.status == CallStatus.FAILED
        assert row.error_class == ToolErrorClass.EXECUTION_ERROR
        assert row.result is not None and row.result.is_error
        assert "cannot be decoded" in row.result.text
        assert "unknown key id 'retired-key'" in row.result.text
        assert row.workflow_id == workflow_id

        [event] = await pg_repo.call_events(session.session_id, call.id)
        assert event.type == "tool.failed"
        assert "unknown key id 'retired-key'" in (event.message or "")
        task = event.data["workflow_task"]
        assert task["cause"] == "workflow_worker_unhandled_failure"
        assert task["failed_attempts"] >= 2 and task["heals"] is False
        assert event.data["ended_by"] == "task_healer"
        assert event.tool_name == "unknown"  # the input could not be read at all
        assert (await pg_repo.verify_chain(session.session_id)).ok
        assert (await pg_repo.verify_meaning(session.session_id)).ok

        desc = await client.get_workflow_handle(workflow_id).describe()
        assert desc.status == WorkflowExecutionStatus.TERMINATED

        # The API answers from the stored row (no 5xx), and lists the call.
        service = CallService(rig.settings, pg_repo, rig.dispatcher)
        resource = await service.resource(session.session_id, call.id)
        assert resource is not None and resource.finished
        assert resource.status == CallStatus.FAILED and resource.problem is None
        listed = await pg_repo.list_calls()
        assert call.id in [c.tool_use_id for c in listed.items]


async def test_cancel_ends_a_wedged_call_and_get_says_why(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    client = await dev_client(dev_server)
    foreign = await foreign_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path) as rig:  # no healer
        session = rig.session("s-wedged")
        # An input that decrypts but is not a CallInput, and one under an unknown key.
        bad_model = await start_raw(
            client, session, "tu_model", {"call": "not a tool_use block"},
            rig.settings.temporal_task_queue,
        )
        call = ToolUseBlock(id="tu_other", name="write_file", input={"path": "x", "content": "y"})
        await start_raw(foreign, session, call.id, CallInput(call=call, session=session),
                        rig.settings.temporal_task_queue)

        async def failing(workflow_id: str) -> Any:
            async def check() -> TaskTrouble | None:
                return await diagnose(client, workflow_id)
            return await until(check, f"{workflow_id} fails its task")

        trouble = await failing(bad_model)
        assert trouble.heals is False and "cannot be decoded" in trouble.reason

        # GET answers (no 503): queued, with the problem spelled out.
        service = CallService(rig.settings, sqlite_repo, rig.dispatcher)
        resource = await service.resource(session.session_id, "tu_model")
        assert resource is not None and resource.status == CallStatus.QUEUED
        assert resource.problem is not None and "cannot heal" in resource.problem

        # The CLI/in-process path: cancel ends it at once.
        assert await rig.dispatcher.cancel(session.session_id, "tu_model") is True
        row = await sqlite_repo.get_call(session.session_id, "tu_model")
        assert row is not None and row.status == CallStatus.CANCELLED
        assert row.error_class == ToolErrorClass.CANCELLED
        assert row.result is not None and "cannot be decoded" in row.result.text
        [event] = await sqlite_repo.call_events(session.session_id, "tu_model")
        assert event.type == "tool.failed" and event.data["ended_by"] == "cancel"
        desc = await client.get_workflow_handle(bad_model).describe()
        assert desc.status == WorkflowExecutionStatus.TERMINATED
        # A second cancel: the call has ended, nothing changes.
        assert await service.cancel(session.session_id, "tu_model") is False

        # The API path (DELETE / POST .../cancel) ends the other one.
        await failing(call_workflow_id(session.session_id, call.id))
        assert await service.cancel(session.session_id, call.id) is True
        row = await sqlite_repo.get_call(session.session_id, call.id)
        assert row is not None and row.status == CallStatus.CANCELLED
        assert "unknown key id 'retired-key'" in (row.reason or "")


class BrokenCodec(EncryptionCodec):
    """Raises a plain error (a bug a deploy would fix) on payloads that mention `marker`."""

    def __init__(self, marker: bytes) -> None:
        keys = {k: decode_key(v) for k, v in TEST_PAYLOAD_KEYS.items()}
        super().__init__(keys, TEST_PAYLOAD_KEY_ID)
        self.marker = marker

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = [self.decrypt(p) for p in payloads]
        if any(self.marker in p.data for p in out):
            raise RuntimeError("a bug the next deploy fixes (test)")
        return out


async def test_a_task_that_may_heal_keeps_retrying_and_is_visible(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    client = await Client.connect(
        dev_server.address, data_converter=converter_with(BrokenCodec(b"buggy-marker"))
    )
    async with durable_rig(client, sqlite_repo, tmp_path, **FAST) as rig:
        session = rig.session("s-heals")
        call = ToolUseBlock(id="tu_bug", name="probe", input={"label": "buggy-marker"})
        handle = await rig.dispatcher.start(call, session)
        healer = TaskHealer(client, rig.settings, sqlite_repo)

        async def past_threshold() -> TaskTrouble | None:
            trouble = await diagnose(client, handle.id)
            return trouble if trouble is not None and trouble.failures >= 2 else None

        trouble = await until(past_threshold, "two failed attempts")
        assert trouble.heals is True and "a bug the next deploy fixes" in trouble.message
        assert await healer.sweep() == []  # left to retry
        service = CallService(rig.settings, sqlite_repo, rig.dispatcher)
        resource = await service.resource(session.session_id, call.id)
        assert resource is not None and not resource.finished
        assert resource.problem is not None and "may heal with a deploy" in resource.problem
        # A cancel is only requested (it is delivered once the task heals).
        assert await rig.dispatcher.cancel(session.session_id, call.id) is False
        assert await sqlite_repo.get_call(session.session_id, call.id) is None
        desc = await handle.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING
        await handle.terminate("test over")


class UnreadableCodec(BrokenCodec):
    """The worker's view of a payload it can never decode (e.g. a retired key)."""

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = [self.decrypt(p) for p in payloads]
        if any(self.marker in p.data for p in out):
            raise CodecError("payload encrypted with unknown key id 'gone' (test)")
        return out


async def test_a_turn_that_cannot_heal_ends_its_calls(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The batch's turn workflow cannot read its input; the healer (whose client
    can) records each of its calls as failed and terminates the turn."""
    worker_client = await Client.connect(
        dev_server.address, data_converter=converter_with(UnreadableCodec(b"turn-marker"))
    )
    client = await dev_client(dev_server)
    async with durable_rig(worker_client, sqlite_repo, tmp_path, **FAST) as rig:
        session = rig.session("s-turn")
        calls = [
            ToolUseBlock(id=f"tu_{i}", name="probe", input={"label": f"turn-marker {i}"})
            for i in range(2)
        ]
        handle = (await rig.dispatcher.start_turn(calls, session)).handle
        assert handle is not None
        async with healing(client, rig.settings, sqlite_repo):

            async def ended() -> Any:
                rows = [await sqlite_repo.get_call(session.session_id, c.id) for c in calls]
                return rows if all(r is not None and r.status.terminal for r in rows) else None

            rows = await until(ended, "the healer ends the turn's calls")
        for row, call in zip(rows, calls, strict=True):
            assert row.status == CallStatus.FAILED and row.tool_name == "probe"
            assert row.turn_id == session.turn_id
            assert "unknown key id 'gone'" in (row.reason or "")
            [event] = await sqlite_repo.call_events(session.session_id, call.id)
            assert event.data["workflow_task"]["workflow_id"] == handle.id
        desc = await client.get_workflow_handle(handle.id).describe()
        assert desc.status == WorkflowExecutionStatus.TERMINATED
        service = CallService(rig.settings, sqlite_repo, rig.dispatcher)
        resource = await service.resource(session.session_id, calls[0].id)
        assert resource is not None and resource.finished


def test_assess_tells_size_and_decoding_from_what_a_deploy_fixes() -> None:
    cause = WorkflowTaskFailedCause
    heals, reason = assess(
        cause.WORKFLOW_TASK_FAILED_CAUSE_PAYLOADS_TOO_LARGE,
        Failure(message="[TMPRL1103] Attempted to upload payloads with size that exceeded "
                "the error limit."),
    )
    assert heals is False and "too large" in reason and "TMPRL1103" in reason
    heals, _ = assess(
        cause.WORKFLOW_TASK_FAILED_CAUSE_BAD_SCHEDULE_ACTIVITY_ATTRIBUTES,
        Failure(message="ScheduleActivityTaskCommandAttributes.Input exceeds size limit."),
    )
    assert heals is False
    heals, _ = assess(
        cause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR,
        Failure(message="[TMPRL1100] Nondeterminism error: ..."),
    )
    assert heals is True
    heals, _ = assess(
        cause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
        Failure(message="KeyError: 'x'", application_failure_info={"type": "KeyError"}),
    )
    assert heals is True
    heals, reason = assess(
        cause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
        Failure(message="payload with key id 'k' failed authentication",
                application_failure_info={"type": "CodecError"}),
    )
    assert heals is False and reason.startswith("its input cannot be decoded")


async def test_a_900_kb_write_reaches_a_status_instead_of_wedging(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """The original incident: a 900 KB write_file made a workflow completion over
    Temporal's 2 MiB limit ([TMPRL1103]) on every attempt. Whether large values
    travel by reference (the call parks) or not (the healer ends it), it never
    stays wedged."""
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, **FAST) as rig:
        session = rig.session("s-big")
        call = ToolUseBlock(
            id="tu_big", name="write_file", input={"path": "big.txt", "content": "x" * 900_000}
        )
        await rig.dispatcher.start(call, session)
        async with healing(client, rig.settings, sqlite_repo):

            async def settled() -> Any:
                row = await sqlite_repo.get_call(session.session_id, call.id)
                done = row is not None and row.status in (CallStatus.PARKED, CallStatus.FAILED)
                return row if done else None

            row = await until(settled, "the big call parks or is ended")
        if row.status == CallStatus.FAILED:
            assert "too large for Temporal" in (row.reason or "")
            assert row.result is not None and "TMPRL1103" in row.result.text
        else:
            await rig.dispatcher.cancel(session.session_id, call.id)
        assert not (rig.workspace / "big.txt").exists()


class FlakyCodec(EncryptionCodec):
    """Fails the first decode of payloads that mention `marker`, then works."""

    def __init__(self, marker: bytes) -> None:
        keys = {k: decode_key(v) for k, v in TEST_PAYLOAD_KEYS.items()}
        super().__init__(keys, TEST_PAYLOAD_KEY_ID)
        self.marker = marker
        self.failed = 0

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = [self.decrypt(p) for p in payloads]
        if self.failed == 0 and any(self.marker in p.data for p in out):
            self.failed += 1
            raise CodecError("payload briefly unreadable (test)")
        return out


async def test_a_task_that_fails_once_then_succeeds_is_not_ended(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    codec = FlakyCodec(b"flaky-marker")
    client = await Client.connect(dev_server.address, data_converter=converter_with(codec))
    async with durable_rig(client, sqlite_repo, tmp_path, **FAST) as rig:
        session = rig.session("s-flaky")
        call = ToolUseBlock(id="tu_flaky", name="probe", input={"label": "flaky-marker"})
        async with healing(client, rig.settings, sqlite_repo) as healer:
            assert healer is not None
            outcome = await rig.dispatcher.dispatch_outcome(call, session)
            assert await healer.sweep() == []
        assert codec.failed == 1  # the first workflow task did fail
        assert outcome.status == CallStatus.SUCCEEDED
        assert outcome.result.text == "probe flaky-marker"
        row = await sqlite_repo.get_call(session.session_id, call.id)
        assert row is not None and row.status == CallStatus.SUCCEEDED
        types = [e.type for e in await sqlite_repo.call_events(session.session_id, call.id)]
        assert "tool.failed" not in types


@pytest.mark.parametrize(
    "bad",
    [
        {"stuck_task_failures": 1},
        {"stuck_task_failures": 1001},
        {"stuck_task_check_seconds": -1},
        {"stuck_task_check_seconds": 7200},
    ],
)
def test_stuck_task_settings_are_bounded(bad: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Settings(data_dir=tmp_path, **bad)


async def test_the_healer_narrows_to_calls_temporal_flags(
    dev_server: DevServer, sqlite_repo: Any, tmp_path: Path
) -> None:
    """With the defaults the sweep is one visibility query over the calls the
    server flags (TemporalReportedProblems), and the dev server accepts it."""
    client = await dev_client(dev_server)
    async with durable_rig(client, sqlite_repo, tmp_path, run_worker=False) as rig:
        healer = TaskHealer(client, rig.settings, sqlite_repo)
        query = await healer.query()
        assert "TemporalReportedProblems IS NOT NULL" in query
        assert f"TaskQueue = '{rig.settings.temporal_task_queue}'" in query
        assert [w async for w in client.list_workflows(query)] == []
        assert await healer.sweep() == []
