"""The decision's shapes in Temporal history keep their wire form (issue 16).

DecisionRecord, DecideInput, DecideResult and ApprovalRecord are defined once
in the domain now (parkgate.approvals.decisions); their JSON must stay what it was:
old JSON (from tests/histories and hand-written samples of the old classes)
decodes to the same values, and the dump is the old flat shape, key for key,
so the previous release can read what this one writes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from parkgate.api.shared.schemas import DecisionOut
from parkgate.approvals.decisions import CALL_DECISION_FIELDS, DecideInput, DecisionRecord
from parkgate.calls.records import ApprovalRecord, CallUpdate
from parkgate.calls.rows import decision_columns
from parkgate.durable.payloads import (
    ACT_CREATE_APPROVAL,
    ACT_EXECUTE,
    ACT_RECORD,
    ACT_RECORD_COMMITTED,
    ApprovalCreated,
    CallOutcome,
    DecideResult,
    ExecuteInput,
    RecordInput,
    SlackOutcomeInput,
)

HISTORIES = Path(__file__).resolve().parents[1] / "histories"

# The old classes' optional fields and their defaults (required fields have none).
DECISION_RECORD = {
    "reason": None, "decided_by": None, "via": None, "approved_hash": None,
    "principal_id": None, "claimed_name": None, "self_approved": False, "votes": [],
    "remember": None,
    # Added by issue 29 (how the decider was identified): the old release
    # ignores it, and old records read back with None.
    "identity": None,
}
DECISION_RECORD_KEYS = {"request_id", "decision", "decided_at", *DECISION_RECORD}
DECIDE_INPUT = {
    "reason": None, "decided_by": None, "via": None, "edited_input": None,
    "principal_id": None, "claimed_name": None, "self_approved": False, "approver": None,
    "remember": None,
    # Added by issue 28 (parkgate.approvals.proof): the old release ignores it, and old
    # inputs read back with None.
    "proof": None,
    # Added by issue 29, as in DECISION_RECORD.
    "identity": None,
}
DECIDE_INPUT_KEYS = {"request_id", "decision", *DECIDE_INPUT}
DECIDE_RESULT = {"winner": None, "message": "", "reason": None, "votes": [], "quorum": 1}
DECIDE_RESULT_KEYS = {"accepted", *DECIDE_RESULT}
APPROVAL = {
    "expires_at": None, "info": {}, "decision": None, "decided_by": None, "via": None,
    "reason": None, "decided_at": None, "principal_id": None, "claimed_name": None,
    "self_approved": None, "votes": None,
    # Added by issue 29, as in DECISION_RECORD.
    "identity": None,
}
APPROVAL_KEYS = {
    "request_id", "session_id", "turn_id", "tool_use_id", "tool_name", "token_hash",
    "input_hash", "requested_at", *APPROVAL,
}


def _payloads(node: Any) -> Iterator[Any]:
    """The json/plain payloads under one history event, decoded."""
    if isinstance(node, dict):
        meta = node.get("metadata")
        if isinstance(meta, dict) and "data" in node:
            if base64.b64decode(meta.get("encoding", "")) == b"json/plain":
                yield json.loads(base64.b64decode(node["data"]))
            return
        for value in node.values():
            yield from _payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payloads(value)


def _attributes(event: dict[str, Any]) -> dict[str, Any]:
    return next((v for k, v in event.items() if k.endswith("Attributes")), {})


def history_samples() -> Iterator[tuple[str, type[BaseModel], dict[str, Any]]]:
    """(where, class, raw JSON) of every payload in the saved histories that
    carries a decision or an approval row."""
    for path in sorted(HISTORIES.glob("*.json")):
        events = json.loads(path.read_text())["history"]["events"]
        activities: dict[str, str] = {}
        for event in events:
            kind, attrs = event["eventType"], _attributes(event)
            cls: type[BaseModel] | None = None
            if kind == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED":
                name = attrs["activityType"]["name"]
                activities[event["eventId"]] = name
                cls = {ACT_RECORD: RecordInput, ACT_RECORD_COMMITTED: RecordInput,
                       ACT_EXECUTE: ExecuteInput}.get(name)
            elif kind == "EVENT_TYPE_ACTIVITY_TASK_COMPLETED":
                name = activities[attrs["scheduledEventId"]]
                cls = ApprovalCreated if name == ACT_CREATE_APPROVAL else None
            elif kind == "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED":
                cls = DecideInput
            elif kind == "EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED":
                cls = DecideResult
            elif kind == "EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED":
                if attrs["workflowType"]["name"] == "parkgate.SlackOutcome":
                    cls = SlackOutcomeInput
            elif kind in ("EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED",
                          "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED"):
                cls = CallOutcome
            if cls is None:
                continue
            for raw in _payloads(event):
                if cls is CallOutcome and "outcomes" in raw:  # a turn's outcome
                    yield from ((f"{path.stem}/{event['eventId']}", CallOutcome, o)
                                for o in raw["outcomes"])
                elif isinstance(raw, dict):
                    yield f"{path.stem}/{event['eventId']}", cls, raw


SAMPLES = list(history_samples())


def _decision_parts(cls: type[BaseModel], raw: dict[str, Any]
                    ) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The decision-shaped objects inside one payload, by kind."""
    if cls is DecideInput:
        yield "input", raw
    elif cls is DecideResult:
        yield "result", raw
        yield "record", raw.get("winner")
    elif cls in (CallOutcome, SlackOutcomeInput):
        yield "record", raw.get("decision")
    elif cls is ApprovalCreated:
        yield "approval", raw["approval"]
    elif cls is RecordInput:
        yield "approval", raw.get("approval")
    elif cls is ExecuteInput:
        yield "approval", (raw.get("resolved") or {}).get("approval")


_SHAPES = {
    "input": (DECIDE_INPUT, DECIDE_INPUT_KEYS),
    "result": (DECIDE_RESULT, DECIDE_RESULT_KEYS),
    "record": (DECISION_RECORD, DECISION_RECORD_KEYS),
    "approval": (APPROVAL, APPROVAL_KEYS),
}


def _dumped_part(kind: str, dump: dict[str, Any], cls: type[BaseModel]) -> dict[str, Any] | None:
    if kind in ("input", "result"):
        return dump
    if kind == "record":
        return dump.get("winner") if cls is DecideResult else dump.get("decision")
    if cls is ExecuteInput:
        return (dump.get("resolved") or {}).get("approval")
    return dump.get("approval")


def test_the_histories_hold_decisions_of_every_shape() -> None:
    kinds = {kind for _, cls, raw in SAMPLES for kind, part in _decision_parts(cls, raw)
             if part is not None}
    assert kinds == set(_SHAPES)


@pytest.mark.parametrize(("where", "cls", "raw"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_history_payloads_decode_to_the_old_values_and_shape(
    where: str, cls: type[BaseModel], raw: dict[str, Any]
) -> None:
    dump = cls.model_validate(raw).model_dump(mode="json")
    for kind, part in _decision_parts(cls, raw):
        got = _dumped_part(kind, dump, cls)
        if part is None:
            assert got is None
            continue
        defaults, keys = _SHAPES[kind]
        assert got is not None
        expected = {**defaults, **part}
        if kind == "result":
            got = {k: v for k, v in got.items() if k != "winner"}
            expected.pop("winner")
            keys = keys - {"winner"}
        assert set(got) == keys, where
        assert got == expected, where


# Hand-written JSON of the old classes, every field set (what the previous
# release writes and must read back from this one).
OLD_RECORD = {
    "request_id": "req-1", "decision": "allow_with_edits", "reason": "fine",
    "decided_by": "alice", "via": "link", "decided_at": "2026-11-23T08:11:15.084000Z",
    "approved_hash": "sha256:abc", "principal_id": "approver:alice",
    "claimed_name": "Alice B.", "self_approved": True, "votes": ["alice", "bob"],
    "remember": {"scope": "session", "ttl_seconds": 3600, "command_prefix": "git status",
                 "approver": "alice"},
}
OLD_INPUT = {
    "request_id": "req-1", "decision": "maybe", "reason": "why not", "decided_by": "key-1",
    "via": "api", "edited_input": {"path": "a.txt"}, "principal_id": "key:k1",
    "claimed_name": "bob", "self_approved": True, "approver": "alice",
    "remember": {"scope": "workspace", "ttl_seconds": 60, "command_prefix": None,
                 "approver": None},
}
OLD_APPROVAL = {
    "request_id": "req-1", "session_id": "s", "turn_id": "t", "tool_use_id": "tu",
    "tool_name": "write_file", "token_hash": "h", "input_hash": "sha256:abc",
    "requested_at": "2026-11-23T08:10:00Z", "expires_at": None, "info": {"rule": "r"},
    "decision": "deny", "decided_by": "bob", "via": "inbox", "reason": "no",
    "decided_at": "2026-11-23T08:11:00Z", "principal_id": "approver:bob",
    "claimed_name": None, "self_approved": None, "votes": ["bob"],
}


@pytest.mark.parametrize(
    ("cls", "sample"),
    [(DecisionRecord, OLD_RECORD), (DecideInput, OLD_INPUT), (ApprovalRecord, OLD_APPROVAL),
     (DecideResult, {"accepted": False, "winner": OLD_RECORD, "message": "already decided",
                     "reason": "already_decided", "votes": ["alice"], "quorum": 2})],
)
def test_full_old_json_round_trips_key_for_key(cls: type[BaseModel], sample: dict[str, Any]
                                               ) -> None:
    model = cls.model_validate(sample)
    dump = model.model_dump(mode="json")
    if cls is DecideInput:
        assert dump.pop("proof") is None  # added since (issue 28)
    for inner in (dump, dump.get("winner") or {}):
        if "request_id" in inner:
            assert inner.pop("identity") is None  # added since (issue 29)
    assert dump == sample
    assert cls.model_validate_json(model.model_dump_json()) == model


def test_a_minimal_old_record_keeps_its_defaults() -> None:
    record = DecisionRecord.model_validate(
        {"request_id": "r", "decision": "deny", "decided_at": "2026-11-23T08:11:15Z"})
    assert record.self_approved is False and record.votes == [] and record.remember is None
    approval = ApprovalRecord.model_validate({k: OLD_APPROVAL[k] for k in APPROVAL_KEYS
                                              if k not in APPROVAL})
    assert approval.model_dump(mode="json") == {
        **APPROVAL, **{k: OLD_APPROVAL[k] for k in APPROVAL_KEYS if k not in APPROVAL}}


def test_the_api_shows_a_record_as_it_did() -> None:
    record = DecisionRecord.model_validate(OLD_RECORD)
    out = DecisionOut.of(record).model_dump(mode="json")
    assert out == {k: OLD_RECORD[k] for k in (
        "request_id", "decision", "reason", "decided_by", "via", "decided_at",
        "principal_id", "claimed_name", "self_approved", "votes")} | {"identity": None}


def test_a_stored_approval_reads_back_as_its_decision() -> None:
    approval = ApprovalRecord.model_validate(
        OLD_APPROVAL | {"decided_at": "2026-11-23T08:11:00", "votes": None})
    record = approval.decision_record()
    assert record is not None
    assert record.model_dump(mode="json") == {
        **DECISION_RECORD, "request_id": "req-1", "decision": "deny", "reason": "no",
        "decided_by": "bob", "via": "inbox", "principal_id": "approver:bob",
        "decided_at": "2026-11-23T08:11:00Z"}  # naive (SQLite) read as UTC; deny: no hash
    allowed = approval.model_copy(update={"decision": "allow", "self_approved": True,
                                          "decided_at": None})
    record = allowed.decision_record()
    assert record is not None
    assert record.approved_hash == "sha256:abc" and record.self_approved is True
    assert record.decided_at == datetime(2026, 11, 23, 8, 10, tzinfo=UTC)
    for undecided in (None, "expired"):
        assert approval.model_copy(update={"decision": undecided}).decision_record() is None


def test_a_decision_maps_onto_the_rows_by_name() -> None:
    record = DecisionRecord.model_validate(OLD_RECORD | {"self_approved": False, "votes": []})
    row = record.approval_fields()
    assert row["self_approved"] is None and row["votes"] is None  # rows: None unless set
    assert ApprovalRecord.model_validate(OLD_APPROVAL | row).decision_record() == (
        record.model_copy(update={"remember": None, "approved_hash": "sha256:abc"}))
    assert set(CALL_DECISION_FIELDS) <= set(CallUpdate.model_fields)
    approval = ApprovalRecord.model_validate(OLD_APPROVAL | row)
    update = CallUpdate(session_id="s", tool_use_id="tu", **decision_columns(approval))
    assert (update.decision, update.decided_by, update.principal_id, update.self_approved) == (
        "allow_with_edits", "alice", "approver:alice", None)
