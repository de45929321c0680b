"""CSRF protection for the approval and audit forms.

Double submit, signed: each render sets a random nonce in an HttpOnly,
SameSite=Strict cookie and puts a signed `{purpose, nonce}` token in a hidden
field. A POST is accepted only when the signature is valid and fresh, the
purpose matches (one approval request, or the audit login) and the nonce
equals the cookie. A foreign site can neither read the cookie nor forge the
signature, and SameSite keeps the cookie off cross-site POSTs anyway. When the
browser sends an Origin header it must be ours as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request

_SALT = "parkgate.csrf.v1"
#: A form rendered more than this long ago must be reloaded.
MAX_AGE_SECONDS = 12 * 3600


def cookie_name(purpose: str) -> str:
    """Per-purpose cookie so two open approval tabs do not clobber each other."""
    return "pg_csrf_" + hashlib.sha256(purpose.encode()).hexdigest()[:16]


def issue(secret: str, purpose: str, nonce: str | None = None) -> tuple[str, str]:
    """(cookie nonce, hidden-field token) for one rendered form.

    Pass the nonce already in the browser's cookie to keep it: then every open
    tab and every re-rendered form stays valid.
    """
    if not nonce or not (16 <= len(nonce) <= 64) or not nonce.replace("-", "").replace(
        "_", ""
    ).isalnum():
        nonce = secrets.token_urlsafe(24)
    token = URLSafeTimedSerializer(secret, salt=_SALT).dumps({"p": purpose, "n": nonce})
    return nonce, str(token)


def check(secret: str, purpose: str, token: str | None, cookie: str | None) -> bool:
    """True when the form token is ours, fresh, for this purpose and matches the cookie."""
    if not token or not cookie:
        return False
    try:
        data = URLSafeTimedSerializer(secret, salt=_SALT).loads(token, max_age=MAX_AGE_SECONDS)
    except BadSignature:
        return False
    if not isinstance(data, dict) or data.get("p") != purpose:
        return False
    nonce = data.get("n")
    return isinstance(nonce, str) and hmac.compare_digest(nonce, cookie)


def origin_ok(request: Request, public_base_url: str) -> bool:
    """Reject requests a browser marks as coming from another site.

    `Sec-Fetch-Site` (all current browsers) must be same-origin or none; an
    `Origin` header, when it names one, must be ours. `Origin: null` is
    accepted because our own pages send `Referrer-Policy: no-referrer`, which
    makes browsers send it on same-origin form posts; the signed token and
    the SameSite=Strict cookie still have to match.
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    allowed = {_origin_of(public_base_url), _origin_of(str(request.base_url))}
    return _origin_of(origin) in allowed


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()
