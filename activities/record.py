"""`parkgate.record` (local) and `parkgate.create_approval`: writes to the history store.

Both are idempotent (events on their deterministic id, rows on their keys), so
Temporal may retry them freely.
"""

from __future__ import annotations

from temporalio import activity

from dispatcher.durable_models import (
    ACT_CREATE_APPROVAL,
    ACT_RECORD,
    ApprovalCreated,
    ApprovalRequest,
    RecordInput,
    RecordOutput,
)
from dispatcher.events import ToolEvent
from dispatcher.links import sign_token, token_hash
from dispatcher.settings import Settings
from dispatcher.store.records import ApprovalRecord, HistoryStore


def approval_url(settings: Settings, token: str) -> str:
    """The link a human opens: public_base_url + /approve/<token>."""
    return f"{settings.public_base_url.rstrip('/')}/approve/{token}"


class RecordActivities:
    """Store writes of the durable path."""

    def __init__(self, store: HistoryStore, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @activity.defn(name=ACT_RECORD)
    async def record(self, inp: RecordInput) -> RecordOutput:
        if inp.approval is not None:
            await self.store.save_approval(inp.approval)
        if inp.events or inp.update is not None:
            await self.store.apply(inp.events, inp.update)
        return RecordOutput(events=len(inp.events))

    @activity.defn(name=ACT_CREATE_APPROVAL)
    async def create_approval(self, req: ApprovalRequest) -> ApprovalCreated:
        """Sign the link, store the request (token hash only), emit confirmation_requested.

        Signing is deterministic for (request_id, expiry), so a retry produces
        the same token and the same stored hash.
        """
        info = req.info
        token = sign_token(self.settings.signing_secret(), info.request_id, req.expires_at)
        url = approval_url(self.settings, token)
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
        await self.store.save_approval(record)
        event = ToolEvent(
            type="tool.confirmation_requested",
            session_id=req.session.session_id,
            turn_id=req.session.turn_id,
            tool_use_id=req.call.id,
            tool_name=info.tool_name,
            side_effects=info.side_effects,
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
        await self.store.apply([event], req.update)
        return ApprovalCreated(
            approval=record, approval_url=url, notify=bool(self.settings.webhooks)
        )
