"""Re-deriving approval links on read.

The store keeps only a token's hash; signing is deterministic for
(request id, expiry), so any reader with the secret rebuilds the link and
checks it against the stored hash instead of storing the token itself.
"""

from __future__ import annotations

from typing import Protocol

from dispatcher.links import sign_token, token_hash
from dispatcher.settings import Settings
from dispatcher.store.records import ApprovalRecord
from dispatcher.store.repository import Repository


class _HasRequest(Protocol):
    @property
    def type(self) -> str: ...

    @property
    def request_id(self) -> str | None: ...


def link_for(settings: Settings, secret: str, approval: ApprovalRecord) -> str | None:
    """The approval URL of a stored request, or None if it does not match the hash."""
    token = sign_token(secret, approval.request_id, approval.expires_at)
    if token_hash(token) != approval.token_hash:
        return None
    return f"{settings.public_base_url.rstrip('/')}/approve/{token}"


async def approval_link(
    repo: Repository, settings: Settings, secret: str, event: _HasRequest
) -> str | None:
    """The link for a tool.confirmation_requested event (None for other events)."""
    if event.type != "tool.confirmation_requested" or not event.request_id:
        return None
    approval = await repo.get_approval(event.request_id)
    return None if approval is None else link_for(settings, secret, approval)
