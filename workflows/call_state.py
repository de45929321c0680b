"""CallState: everything one ToolCallWorkflow run knows, in one object.

ToolCallWorkflow builds one `CallState` in its `__init__` and hands it to each
of its parts (call_record.py, call_decide.py, call_park.py, call_notices.py,
call_exec.py, client_exec.py, client_updates.py), which read and write the
call's state only through it (`self.state.status`). Every field is declared
here, once, in one of the groups below; a part's constructor says which
other parts it calls, so what a part depends on is in its signature rather
than in a base class or a list of attributes it expects to find on `self`.

A plain class, not a dataclass: the workflow sandbox executes this module
again for every run, and `@dataclass` compiles generated methods each time
(about 10 ms for this many fields; a plain class costs some 50 µs).
The fields are set in `__init__` through one method per group, whose
docstring says what the group is for. Deterministic code only: nothing
here reads a clock, the environment or the store.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from parkgate.calls.records import CallStatus

if TYPE_CHECKING:
    from parkgate.approvals.decisions import DecisionRecord
    from parkgate.calls.records import ApprovalRecord
    from parkgate.durable.client_payloads import (
        ClaimRecord,
        OutcomeInput,
        OutcomeResult,
        ReleaseView,
    )
    from parkgate.durable.payloads import CallInput, CallOutcome, RecordInput, SlackMessageRef
    from parkgate.verdicts import ApprovalInfo, PreparedCall


class CallState:
    """The state of one call's workflow run, shared by the workflow's parts."""

    def __init__(self, inp: CallInput) -> None:
        self._the_call(inp)
        self._the_approval()
        self._the_writes()
        self._the_notices()
        self._the_client()

    def _the_call(self, inp: CallInput) -> None:
        """The call and where it stands: what the status query shows and what
        every store write is about."""
        self.input = inp
        self.status = CallStatus.QUEUED
        #: The verdict's kind, once classified ("execute", "deny", ...).
        self.verdict: str | None = None
        #: The call as classified (the approver's edit replaces it).
        self.prepared: PreparedCall | None = None
        self.outcome: CallOutcome | None = None

    def _the_approval(self) -> None:
        """The approval request and its decision: set while the call is parked
        (Parking), decided by the decide update (Decisions)."""
        self.info: ApprovalInfo | None = None
        self.approval: ApprovalRecord | None = None
        self.approval_url: str | None = None
        self.decision: DecisionRecord | None = None
        #: Quorum requests: named approvers who have allowed so far (Decisions._tally).
        self.votes: list[str] = []
        #: Set while an accepted update is revalidating edits (old histories).
        self.deciding = False
        #: Serializes applying decisions (an update may await revalidation).
        self.decide_lock = asyncio.Lock()
        #: Accepted decide updates/signals not finished yet: expiry waits for them.
        self.pending_decisions = 0
        #: The resolution not yet written (patched path): goes with the next write.
        self.unwritten_resolution: RecordInput | None = None

    def _the_writes(self) -> None:
        """Store writes, cancellation and the patches asked once: how this run
        writes (PATCH_COMMITTED_WRITES) and which branches its history took."""
        #: PATCH_COMMITTED_WRITES, once asked (None before the call parks).
        self.committed_writes: bool | None = None
        #: A cancellation swallowed while a store write finished (CallRecording.shielded).
        self.cancel_requested = False
        #: PATCH_PROVEN_DECISIONS, once asked.
        self.proven_signals: bool | None = None
        #: PATCH_DECIDE_SIGNAL_RETIRED, once asked.
        self.retired_signals: bool | None = None
        #: Patch "cancel-notify-on-end": a call's end cancels its pending webhook.
        self.cancel_notify_on_end = False

    def _the_notices(self) -> None:
        """The notices of a parked call (Notices): their tasks and the Slack message."""
        #: The webhook, reminder and Slack tasks started while parked.
        self.background: list[asyncio.Task[None]] = []
        #: The call's Slack message once posted (ApprovalCreated.slack).
        self.slack_message: SlackMessageRef | None = None
        self.slack = False

    def _the_client(self) -> None:
        """A client tool's release, claim and outcome (ClientExecution, ClientUpdates)."""
        self.release: ReleaseView | None = None
        #: PATCH_JCS_INPUT_SHA256, asked at the start of a client tool's call.
        self.jcs_input_sha256 = False
        #: The release's store write has committed (claims accepted while it was
        #: in flight wait for it: the store may show the release first).
        self.release_stored = False
        self.claim: ClaimRecord | None = None
        self.claim_stored = False
        self.report: OutcomeInput | None = None
        self.report_result: OutcomeResult | None = None
        self.refusals = 0
        #: classify checked CallInput.claim's proof (ClassifyOutput.claim_checked):
        #: its verdict, from history, decides the claim at release.
        self.claim_checked = False
        self.claim_unproven: str | None = None
        #: ExecPlan.unclaimed_seconds: how long a release waits for its claim
        #: (None, in histories from before: it waits on).
        self.unclaimed_seconds: float | None = None
        #: PATCH_CLAIM_RESERVATION, asked at the start of a client tool's call.
        self.reserving = False
        #: Claims recorded (reservations taken, taken over or after a lapse):
        #: the seq of the next tool.claimed event.
        self.claims = 0
        self.lapses = 0
        #: A lapse's store write in flight: a new claim writes after it.
        self.lapsing = False
        #: The started claim's store write has committed.
        self.start_stored = False
