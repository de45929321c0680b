"""A call's state is defined once: `CallColumns` is the `tool_calls` table.

The store's write (`CallUpdate`) and read (`CallRecord`) shapes derive from
it; this pins that they and the table cannot drift apart (a column added to
one and not the other would be silently dropped on write or never read).
"""

from __future__ import annotations

from parkgate.calls.records import CallColumns, CallEnd, CallUpdate, RecordedFinish
from parkgate.durable.payloads import CallOutcome
from parkgate.store.results import CallRecord
from parkgate.store.statements import CALLS

#: The row's keys and bookkeeping, beside the columns that describe a call.
_KEYS = {"id", "session_id", "tool_use_id", "status", "updated_at"}


def test_call_columns_are_the_tool_calls_table() -> None:
    table = {column.name for column in CALLS.columns}
    assert set(CallColumns.model_fields) | _KEYS == table


def test_write_and_read_shapes_are_the_columns_plus_keys() -> None:
    columns = set(CallColumns.model_fields)
    assert set(CallUpdate.model_fields) == columns | {"session_id", "tool_use_id", "status"}
    assert set(CallRecord.model_fields) == columns | _KEYS
    assert issubclass(CallUpdate, CallColumns) and issubclass(CallRecord, CallColumns)


def test_a_calls_end_is_part_of_its_row() -> None:
    """What the workflow returns and what the store says a call ended with
    (RecordedFinish) are the same fields, all of them row columns."""
    assert issubclass(RecordedFinish, CallEnd) and issubclass(CallOutcome, CallEnd)
    assert set(CallEnd.model_fields) <= set(CallRecord.model_fields)


def test_the_apis_call_models_show_row_columns_by_their_names() -> None:
    """CallResource and CallSummary are read from the row by name
    (`stored_fields`): every field they share with the row is a column, and
    the rest are the API's own (links, live approval state, problems)."""
    from parkgate.api.shared.schemas import CallResource, CallSummary

    row = set(CallRecord.model_fields)
    api_only = {"finished", "approval_url", "expires_at", "waiting_for", "approvers", "quorum",
                "votes", "approver_links", "problem", "links",
                # A released client call: what only its workflow knows.
                "input_sha256", "released_at", "claimed_by", "claimed_at", "lease_expires_at",
                # A submit that claims: whether this request holds the claim, and
                # the reservation it starts before running the call.
                "claim_won", "claim_id"}
    assert set(CallResource.model_fields) - row == api_only
    assert set(CallSummary.model_fields) <= row
    for model in (CallResource, CallSummary):
        for name in set(model.model_fields) & row:
            assert name in CallColumns.model_fields or name in _KEYS, name
