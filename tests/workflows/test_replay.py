"""Replay saved histories (tests/histories/*.json) against the current workflow code.

A failure here means a code change would break calls that are parked or
running right now: guard the change with `workflow.patched` (docs/DURABLE.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from tests.fixtures.temporal import replayer

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
PATHS = [
    "auto", "approved", "denied", "expired", "cancelled", "edited", "turn_no_rerun", "quorum",
    "slack", "reminders",
    # sessions with a worker group: workspace activities on `<queue>.<group>`
    "grouped", "grouped_auto",
    # client-executed calls: released, claimed, reported / lease ended (issue 24);
    # these and client_claimed_at_release predate "claim-reservation" (issue 36)
    "client_released", "client_lease",
    # issue 27: the submitter's claim taken in the release's own write
    "client_claimed_at_release",
    # issue 37: an input with floats released with its RFC 8785 input_sha256, the
    # report in the json.dumps form taken (patches jcs-input-sha256,
    # either-input-sha256-form)
    "client_float",
    # issue 37: every decide signal ignored, proven or not (patch
    # decide-signal-retired-v1); a late report's proof checked by its activity
    # (late-outcome-proof-in-activity-v1); a release nobody claims ends unclaimed
    "signal_retired", "client_late_checked", "client_unclaimed",
    # issue 36 (patch claim-reservation): a reservation lapses, another is taken
    # over by its claimer, started and reported
    "client_reserved",
    # issue 37: a composed tool's run parked at sub-calls (patch sub-call-parks),
    # and the SubCallApproval child that waited for the first one
    "composed_sub_calls", "sub_call_approval",
]
#: Histories recorded before a workflow.patched change (they replay the old
#: branch). *_pre_patch: before "committed-decision-writes-v1" (issue 12), when
#: decision-dependent writes were local activities.
LEGACY: list[str] = [
    "approved_pre_patch",
    "denied_pre_patch",
    "expired_pre_patch",
    "cancelled_pre_patch",
    "edited_pre_patch",
    # before "approver-edit-note" (issue 40): an edited call's result had no note
    "edited_pre_note",
    # before "turn-child-no-rerun" (issue 28): children started with the
    # default id reuse policy
    "turn",
    # before "jcs-input-sha256" (issue 37): a client-executed call whose input
    # has floats (0.1, 1.0, 1e21) and keys UTF-16 orders otherwise, released
    # with the json.dumps input_sha256 and reported with it (recorded with the
    # release before RFC 8785)
    "client_float_pre_jcs",
    # before "decide-signal-retired-v1" (issue 37): forged decide signals
    # ignored, then a proven one decides (patch proven-decisions-v1, issue 28)
    "proven_signal",
    # before "late-outcome-proof-in-activity-v1" (issue 37): the workflow
    # checked the late report's proof itself
    "client_late",
]


def load(name: str) -> WorkflowHistory:
    doc = json.loads((HISTORIES / f"{name}.json").read_text())
    return WorkflowHistory.from_json(doc["workflow_id"], doc["history"])


def test_every_path_has_a_history() -> None:
    saved = sorted(p.stem for p in HISTORIES.glob("*.json"))
    assert set(PATHS) <= set(saved)


@pytest.mark.parametrize("name", PATHS + LEGACY)
async def test_history_replays(name: str) -> None:
    result = await replayer().replay_workflow(load(name), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{name}: {result.replay_failure}"
