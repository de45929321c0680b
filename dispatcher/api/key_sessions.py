"""Pages signed in with an API key: the audit pages and the approver inbox.

Both keep the key id in a signed, timed cookie; this is the one place that
reads it back and checks the key is still active and holds the page's role.
"""

from __future__ import annotations

from fastapi import Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from parkgate.access import Role
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
