"""Signed approval links: one token per approval request, bound to its id and expiry.

Signing uses itsdangerous (HMAC-SHA256, URL-safe). Only the token's SHA-256
is stored, so a database leak does not leak working links.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from itsdangerous import BadSignature, URLSafeSerializer

_SALT = "parkgate.approval-link.v1"


class LinkError(Exception):
    """A token that is not valid: tampered, malformed or for another purpose."""


def _serializer(secret: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret, salt=_SALT)


def sign_token(secret: str, request_id: str, expires_at: datetime | None) -> str:
    """A token naming one request and its expiry (None = never)."""
    payload = {"rid": request_id, "exp": int(expires_at.timestamp()) if expires_at else None}
    return str(_serializer(secret).dumps(payload))


def verify_token(secret: str, token: str) -> tuple[str, int | None]:
    """Return (request_id, expiry epoch or None); raise LinkError when tampered.

    Expiry is checked by the caller against the stored request so an expired
    link renders a clear "expired" page rather than a generic error.
    """
    try:
        payload = _serializer(secret).loads(token)
    except BadSignature as exc:
        raise LinkError("this approval link is not valid") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("rid"), str):
        raise LinkError("this approval link is not valid")
    exp = payload.get("exp")
    return payload["rid"], exp if isinstance(exp, int) else None


def token_hash(token: str) -> str:
    """What the database stores instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
