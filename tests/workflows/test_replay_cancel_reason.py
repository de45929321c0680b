"""A call cancelled before cancel requests carried a reason replays to the
very record it wrote: the final write the workflow schedules on replay is the
one the history holds, word for word (no `by`, no event data). The reason
itself is unit-checked here: parkgate's encoding round-trips, a reason from
outside parkgate is kept as the reason, "" and None are no cancellation."""

from __future__ import annotations

from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import (
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.workflow import ActivityHandle

from parkgate.calls.cancellation import Cancellation
from parkgate.durable.payloads import RecordInput
from tests.fixtures.temporal import replayer
from tests.workflows.test_replay import load

#: What the replayed workflow schedules (filled from inside the sandbox: the
#: interceptor class is built here, so its globals are this module's).
SCHEDULED: list[tuple[str, Any]] = []


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        SCHEDULED.append((input.activity, input.args[0] if input.args else None))
        return super().start_activity(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Capture(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound


def _recorded_final_write(name: str) -> RecordInput:
    """The last record_committed input the history holds (as it was scheduled)."""
    history = load(name)
    scheduled = [e.activity_task_scheduled_event_attributes for e in history.events
                 if e.HasField("activity_task_scheduled_event_attributes")]
    last = [a for a in scheduled if a.activity_type.name == "parkgate.record_committed"][-1]
    # Histories are saved with plain JSON payloads (tests/histories/regenerate.py).
    [decoded] = pydantic_data_converter.payload_converter.from_payloads(
        list(last.input.payloads), [RecordInput])
    assert isinstance(decoded, RecordInput)
    return decoded


async def test_an_old_cancelled_history_replays_to_the_record_it_wrote() -> None:
    SCHEDULED.clear()
    base = replayer()
    from temporalio.worker import Replayer

    config = base.config(active_config=True)
    config["interceptors"] = [*config.get("interceptors", []), _Capture()]
    capturing = Replayer(**config)  # type: ignore[misc]
    result = await capturing.replay_workflow(load("cancelled"), raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    writes = [arg for activity, arg in SCHEDULED if activity == "parkgate.record_committed"]
    assert writes, SCHEDULED
    replayed = writes[-1]
    recorded = _recorded_final_write("cancelled")
    # The events are the same, to the byte; the row's text too (the history
    # holds it in `update`, the write's shape of its day, not in `facts`).
    assert [e.model_dump(mode="json") for e in replayed.events] == \
        [e.model_dump(mode="json") for e in recorded.events]
    [failed] = [e for e in replayed.events if e.type == "tool.failed"]
    assert failed.message == "The call was cancelled before it ran." and failed.data == {}
    assert replayed.facts is not None and replayed.facts.end is not None
    assert recorded.update is not None and recorded.update.result is not None
    assert replayed.facts.end.result.text == recorded.update.result.text == failed.message


def test_the_reason_round_trips_and_old_requests_carry_none() -> None:
    sent = Cancellation(by="key 'ci'", via="api", reason="too slow")
    assert Cancellation.decode(sent.encode()) == sent
    assert sent.suffix() == " (by key 'ci' via api: too slow)"
    assert Cancellation(by="cli:ann", via="parkgate cancel").suffix() == \
        " (by cli:ann via parkgate cancel)"
    assert Cancellation.decode("") is None and Cancellation.decode(None) is None
    outside = Cancellation.decode("operator cleanup\x00")
    assert outside == Cancellation(reason="operator cleanup?")
    assert outside.suffix() == " (operator cleanup?)"
    assert Cancellation.decode('{"parkgate_cancel": 1}') is None
    assert Cancellation.decode("x" * 5000) == Cancellation(reason="x" * 1000)


def test_any_text_a_temporal_client_sends_is_read_without_raising() -> None:
    """The reason is read inside the workflow: an exception there would fail
    every attempt of its workflow task and strand the call. Deeply nested JSON
    (json.loads' RecursionError), control characters and huge text are kept as
    a clipped reason."""
    for raw in ("[" * 100_000, '{"parkgate_cancel": 1, "by": ' * 5000, "\x00\x1b[2J" * 1000,
                "x" * 1_000_000, '{"parkgate_cancel": 1, "by": 7, "reason": ["a"]}'):
        found = Cancellation.decode(raw)
        assert found is None or len(found.suffix()) < 2_000
