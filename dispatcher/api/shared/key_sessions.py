"""Pages signed in with an API key: the audit pages and the approver inbox.

Both sign in with the same form (an API key, CSRF-checked) and keep the key
id in a signed, timed cookie; this is the one place that checks the form (and
the sign-out forms, OIDC's too: `posted_form`) and reads the cookie back,
checking the key is still active and holds the role.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from parkgate.api.shared import csrf
from parkgate.approvals.access import Role
from parkgate.settings import Settings
from parkgate.store import Repository
from parkgate.store.results import ApiKeyRecord


async def signed_in_key(
    request: Request, *, cookie: str, salt: str, max_age: int, role: Role
) -> ApiKeyRecord | None:
    """The active API key a page session cookie names, if it holds `role`; else None."""
    raw = request.cookies.get(cookie)
    if not raw:
        return None
    try:
        data = URLSafeTimedSerializer(request.app.state.secret, salt=salt).loads(
            raw, max_age=max_age
        )
    except BadSignature:
        return None
    key_id = data.get("kid") if isinstance(data, dict) else None
    if not isinstance(key_id, str):
        return None
    repo: Repository = request.app.state.deps.repo
    key = await repo.get_api_key(key_id)
    if key is None or role.value not in key.roles:
        return None
    return key


@dataclass(frozen=True)
class SignIn:
    """What a posted sign-in form came to: the key, or the status and error to show."""

    key: ApiKeyRecord | None
    status: int
    error: str
    #: The form's `next` field as posted (the page decides which paths are safe).
    next: str | None


async def posted_form(request: Request, purpose: str) -> tuple[dict[str, str], bool]:
    """A posted page form's text fields, and whether its origin and CSRF token
    (for `purpose`) are ours: what every sign-in and sign-out form checks."""
    settings: Settings = request.app.state.settings
    try:
        form = await request.form(max_fields=10, max_files=0)
    except Exception:
        form = None
    fields = {k: v for k, v in (form or {}).items() if isinstance(v, str)}
    ok = form is not None and csrf.origin_ok(request, settings.public_base_url) and csrf.check(
        request.app.state.secret, purpose, fields.get("csrf"),
        request.cookies.get(csrf.cookie_name(purpose)),
    )
    return fields, ok


async def sign_in(request: Request, *, purpose: str, role: Role, no_role: str) -> SignIn:
    """Check a posted sign-in form: origin and CSRF (else 403), the API key
    (else 401), the page's role (else 403 with `no_role`)."""
    fields, ok = await posted_form(request, purpose)
    if not ok:
        return SignIn(None, 403, "The form expired; try again.", fields.get("next"))
    repo: Repository = request.app.state.deps.repo
    key = await repo.verify_api_key(fields.get("api_key", "").strip())
    if key is None:
        return SignIn(None, 401, "Invalid or revoked API key.", fields.get("next"))
    if role.value not in key.roles:
        return SignIn(None, 403, no_role, fields.get("next"))
    return SignIn(key, 200, "", fields.get("next"))
