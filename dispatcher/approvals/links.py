"""Signed approval links: one token per approval request, bound to its id and expiry.

Signing uses itsdangerous (HMAC-SHA256, URL-safe). Only the token's SHA-256
is stored, so a database leak does not leak working links; and no token is
written to Temporal history either: signing is deterministic for (request id,
expiry), so every reader derives the link with `approval_url` when it needs it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from itsdangerous import BadSignature, URLSafeSerializer, URLSafeTimedSerializer

_SALT = "parkgate.approval-link.v1"


class LinkError(Exception):
    """A token that is not valid: tampered, malformed or for another purpose."""


def _serializer(secret: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret, salt=_SALT)


def sign_token(secret: str, request_id: str, expires_at: datetime | None) -> str:
    """A token naming one request and its expiry (None = never)."""
    payload = {"rid": request_id, "exp": int(expires_at.timestamp()) if expires_at else None}
    return str(_serializer(secret).dumps(payload))


def approval_url(
    public_base_url: str, secret: str, request_id: str, expires_at: datetime | None
) -> str:
    """The link a human opens for one approval request: <base>/approve/<token>.

    The one place links are derived (API views, webhooks, the status query's
    readers); never stored, never put into workflow history.
    """
    token = sign_token(secret, request_id, expires_at)
    return f"{public_base_url.rstrip('/')}/approve/{token}"


def sign_personal_token(
    secret: str, request_id: str, expires_at: datetime | None, approver: str
) -> str:
    """A named approver's own link: bound to the request, its expiry and the approver.

    Derived (never stored): anyone holding the secret rebuilds it from the
    request id, expiry and approver name, so it need not travel through history.
    """
    payload = {
        "rid": request_id,
        "exp": int(expires_at.timestamp()) if expires_at else None,
        "apr": approver,
    }
    return str(_serializer(secret).dumps(payload))


def token_approver(secret: str, token: str) -> str | None:
    """The named approver a verified token is bound to (None for a generic link)."""
    try:
        payload = _serializer(secret).loads(token)
    except BadSignature as exc:
        raise LinkError("this approval link is not valid") from exc
    approver = payload.get("apr") if isinstance(payload, dict) else None
    return approver if isinstance(approver, str) else None


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


_INBOX_SALT = "parkgate.inbox-link.v1"


def sign_inbox_token(secret: str, approver: str) -> str:
    """A named approver's personal inbox link token: names the approver, not a
    request, and is timestamped (`verify_inbox_token` enforces the max age)."""
    return str(URLSafeTimedSerializer(secret, salt=_INBOX_SALT).dumps({"apr": approver}))


def verify_inbox_token(secret: str, token: str, max_age_seconds: int) -> str:
    """The approver an inbox token names; LinkError when tampered or expired."""
    try:
        payload = URLSafeTimedSerializer(secret, salt=_INBOX_SALT).loads(
            token, max_age=max_age_seconds
        )
    except BadSignature as exc:  # SignatureExpired is a BadSignature
        raise LinkError("this inbox link is not valid or has expired") from exc
    approver = payload.get("apr") if isinstance(payload, dict) else None
    if not isinstance(approver, str) or not approver:
        raise LinkError("this inbox link is not valid")
    return approver


def inbox_url(public_base_url: str, secret: str, approver: str) -> str:
    """<base>/inbox/p/<token>: every request naming `approver`, in one list."""
    return f"{public_base_url.rstrip('/')}/inbox/p/{sign_inbox_token(secret, approver)}"
