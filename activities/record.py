"""`parkgate.record` (local), `parkgate.record_committed` and `parkgate.create_approval`.

Both are idempotent (events on their deterministic id, rows on their keys), so
Temporal may retry them freely.
"""

from __future__ import annotations

import logging

from temporalio import activity

from parkgate.activities.budgets import reprice_edit
from parkgate.approvals.access import DEFAULT_PROJECT
from parkgate.approvals.links import sign_token, token_hash
from parkgate.calls.events import ToolEvent
from parkgate.calls.records import ApprovalRecord, CallUpdate, HistoryStore
from parkgate.calls.rows import parked, row_for
from parkgate.durable.payloads import (
    ACT_CREATE_APPROVAL,
    ACT_RECORD,
    ACT_RECORD_COMMITTED,
    ApprovalCreated,
    ApprovalRequest,
    RecordInput,
    RecordOutput,
)
from parkgate.rules.remembered import RememberError, rule_for
from parkgate.settings import Settings
from parkgate.verdicts import ApprovalInfo

log = logging.getLogger("parkgate.activities.record")


def approval_url(settings: Settings, token: str) -> str:
    """The link for an already signed token (in-process sub-calls only)."""
    return f"{settings.public_base_url.rstrip('/')}/approve/{token}"


def record_row(inp: RecordInput) -> CallUpdate | None:
    """The call-row change a record input makes: from its facts and the
    decision of its approval (older histories carry the row itself)."""
    if inp.update is not None:
        return inp.update
    if inp.facts is None:
        return None
    return row_for(inp.facts, inp.approval)


async def write_approval(store: HistoryStore, inp: RecordInput) -> None:
    """Store `inp.approval`: the whole request, or only its decision (first write
    wins), and the remembered rule the decision asked for."""
    approval = inp.approval
    if approval is None:
        return
    await _write_approval(store, inp, approval)
    if inp.remember is not None:
        await write_remembered(store, inp, approval)


async def write_remembered(store: HistoryStore, inp: RecordInput,
                           approval: ApprovalRecord) -> None:
    """Create the rule an allow with `remember` asked for; idempotent (its id
    derives from the request id). Only the stored winning allow counts."""
    save = getattr(store, "save_remembered", None)
    spec, update = inp.remember, record_row(inp)
    if save is None or spec is None or update is None or update.input is None:
        return
    get_approval = getattr(store, "get_approval", None)
    stored = approval if get_approval is None else await get_approval(approval.request_id)
    if stored is None or stored.decision not in ("allow", "allow_with_edits"):
        return
    get_session = getattr(store, "get_session", None)
    session = None if get_session is None else await get_session(approval.session_id)
    workspace = session.workspace_path if session is not None else ""
    try:
        rule = rule_for(
            spec,
            request_id=approval.request_id,
            project=session.project if session is not None else DEFAULT_PROJECT,
            session_id=approval.session_id,
            workspace_path=workspace,
            tool_name=approval.tool_name,
            tool_input=update.input,
            decided_at=stored.decided_at or approval.decided_at or approval.requested_at,
            created_by=stored.decided_by,
            principal_id=stored.principal_id,
            approver=spec.approver,
        )
    except RememberError as exc:  # the API checked; an edited input may differ
        log.warning("remember on %s not stored: %s", approval.request_id, exc)
        return
    await save(rule)


async def _write_approval(store: HistoryStore, inp: RecordInput,
                          approval: ApprovalRecord) -> None:
    decide = getattr(store, "decide_approval", None)
    if inp.approval_decision_only and approval.decision is not None and decide is not None:
        await decide(
            approval.request_id,
            approval.decision,
            approval.decided_by,
            approval.via,
            approval.reason,
            decided_at=approval.decided_at,
            principal=approval.principal() | {"votes": approval.votes},
        )
        return
    await store.save_approval(approval)


class RecordActivities:
    """Store writes of the durable path."""

    def __init__(self, store: HistoryStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @activity.defn(name=ACT_RECORD)
    async def record(self, inp: RecordInput) -> RecordOutput:
        await write_approval(self.store, inp)
        row = record_row(inp)
        if row is not None and self.settings.budgets:
            await reprice_edit(self.store, self.settings.budgets, row)
        conditional = getattr(self.store, "record_unless_finished", None)
        if inp.unless_finished and row is not None and conditional is not None:
            finished = await conditional(inp.events, row)
            return RecordOutput(events=len(inp.events), finished=finished)
        if inp.events or row is not None:
            await self.store.apply(inp.events, row)
        return RecordOutput(events=len(inp.events))

    @activity.defn(name=ACT_RECORD_COMMITTED)
    async def record_committed(self, inp: RecordInput) -> RecordOutput:
        """The same write as a regular activity: it runs only once the workflow
        task that decided it is committed (decision-dependent writes)."""
        return await self.record(inp)

    @activity.defn(name=ACT_CREATE_APPROVAL)
    async def create_approval(self, req: ApprovalRequest) -> ApprovalCreated:
        """Sign the link, store the request (token hash only), emit confirmation_requested.

        Signing is deterministic for (request_id, expiry), so a retry produces
        the same token and the same stored hash.
        """
        info = req.info
        token = sign_token(self.settings.signing_secret(), info.request_id, req.expires_at)
        record = ApprovalRecord(
            request_id=info.request_id,
            session_id=req.session.session_id,
            turn_id=req.session.turn_id,
            tool_use_id=req.call.id,
            tool_name=info.tool_name,
            token_hash=token_hash(token),
            input_hash=info.input_hash,
            requested_at=req.requested_at,
            expires_at=req.expires_at,
            info=info.model_dump(mode="json"),
        )
        # The stored request keeps the original input, so a page shown after an
        # edit can diff it (the call row then holds the edited input). Not in
        # the returned record: that goes into workflow history.
        stored = record if "input" in record.info else record.model_copy(
            update={"info": {**record.info, "input": req.call.input}})
        await self.store.save_approval(stored)
        event = ToolEvent(
            type="tool.confirmation_requested",
            session_id=req.session.session_id,
            turn_id=req.session.turn_id,
            tool_use_id=req.call.id,
            tool_name=info.tool_name,
            side_effects=info.side_effects,
            # A composed tool's sub-call: the event joins its parent's chain.
            parent_tool_use_id=info.parent_tool_use_id,
            at=req.requested_at,
            request_id=info.request_id,
            # No approval_url here: the link holds the token and the store keeps
            # only its hash. Readers re-derive the link (signing is deterministic).
            data={
                "input_summary": info.input_summary,
                "projected_impact": list(info.projected_impact),
                "rule": info.rule,
                "input_hash": info.input_hash,
                "expires_at": req.expires_at.isoformat() if req.expires_at else None,
                "diff": info.diff,
                "workflow_id": req.workflow_id,
            },
        )
        row = req.update
        if row is None and req.ref is not None:
            row = parked(req.ref, info, req.call.input)
        await self.store.apply([event], row)
        # No link in the result either: it would be written to workflow history.
        return ApprovalCreated(approval=record, notify=self._notifies(info),
                               slack=self.settings.slack_enabled)

    def _notifies(self, info: ApprovalInfo) -> bool:
        """Whether parkgate.notify has anyone to tell: a webhook, or a named
        approver with an address while e-mail is configured."""
        if self.settings.webhooks:
            return True
        if not self.settings.email_enabled:
            return False
        return any((a := self.settings.approvers.get(n)) is not None and a.email
                   for n in [*info.approvers, *info.escalate_to])
