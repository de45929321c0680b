"""Sign-in with the company's identity provider (OIDC) and sign-out.

`GET /auth/oidc/login?next=...` starts an authorization code flow with PKCE
(S256), a fresh `state` and `nonce` kept in a short-lived signed HttpOnly
cookie named after the state (several tabs may sign in at once), and sends the
browser to the provider. `GET /auth/oidc/callback` accepts the provider's
answer once: the state must match a pending cookie and never have been used,
the code is redeemed with the PKCE verifier, and the ID token must verify
(oidc_provider.OidcProvider.verify). Only then is the session cookie set
(oidc_sessions). `POST /auth/signout` (CSRF-checked like every form) ends the
OIDC session and the API-key page sessions. Nothing here decides a call: the
GETs only read and set sign-in cookies.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from parkgate.api.shared import oidc_sessions
from parkgate.api.shared.key_sessions import posted_form
from parkgate.api.shared.oidc_provider import OidcError, provider
from parkgate.api.shared.signin import SIGNOUT_PURPOSE, login_url, root, secure
from parkgate.api.shared.views import page_headers
from parkgate.settings import Settings

router = APIRouter(include_in_schema=False)

_PENDING_SALT = "parkgate.oidc-login.v1"
#: A sign-in must come back from the provider within this long.
PENDING_SECONDS = 600
#: States already redeemed in this process (state -> when it would expire anyway).
_USED_STATES: dict[str, float] = {}
_HEADERS = page_headers(
    "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
#: Where a sign-in may return to (no open redirect).
_NEXT_PREFIXES = ("/inbox", "/audit", "/approve/")


def _message(request: Request, status: int, title: str, text: str, detail: str = "",
             kind: str = "error", link: tuple[str, str] | None = None) -> HTMLResponse:
    response: HTMLResponse = request.app.state.templates.TemplateResponse(
        request, "message.html",
        {"static_url": request.app.state.static_url, "root": root(request), "title": title,
         "text": text, "detail": detail, "kind": kind,
         "link_url": link[0] if link else None, "link_text": link[1] if link else None},
        status_code=status, headers=_HEADERS,
    )
    return response


def sign_in_page(request: Request, status: int, title: str, text: str, next_path: str,
                 detail: str = "") -> HTMLResponse:
    """A page whose button starts the provider's sign-in and comes back to `next_path`.

    A link, not a redirect: a form POST redirected to the provider would be
    blocked by the pages' `form-action 'self'` policy (and should not be replayed).
    """
    return _message(request, status, title, text, detail, kind="warn",
                    link=(login_url(request, safe_next(next_path)), "Sign in again"))


def renew_page(request: Request, next_path: str) -> HTMLResponse:
    """A decision with claims older than `oidc_decision_max_age_seconds`."""
    settings: Settings = request.app.state.settings
    minutes = max(1, settings.oidc_decision_max_age_seconds // 60)
    return sign_in_page(
        request, 401, "Confirm it is you",
        f"Deciding needs a sign-in from the last {minutes} min; yours is older. Nothing "
        "was decided.", next_path,
        "Your identity provider confirms you (and your groups) again, then decide again.")


def safe_next(value: str | None) -> str:
    """A same-site path under the pages that sign in; else the inbox."""
    if value and value.startswith(_NEXT_PREFIXES) and not value.startswith("//") \
            and "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return "/inbox"


def _pending_cookie(state: str) -> str:
    return "pg_oidc_" + hashlib.sha256(state.encode()).hexdigest()[:16]


def _pending(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_PENDING_SALT)


@router.get("/auth/oidc/login")
async def oidc_login(request: Request, next: str | None = None) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.oidc_enabled:
        return _message(request, 404, "Not found",
                        "Sign-in with an identity provider is not configured on this server.")
    try:
        login = await provider(request).start()
    except OidcError as exc:
        return _message(request, 502, "Identity provider unavailable",
                        f"Sign-in could not start: {exc.message}.", "Try again in a moment.")
    response = RedirectResponse(login.url, status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(
        _pending_cookie(login.state),
        _pending(request).dumps({"s": login.state, "n": login.nonce, "v": login.code_verifier,
                                 "next": safe_next(next)}),
        # Lax: the provider's redirect back is a cross-site top-level GET.
        max_age=PENDING_SECONDS, httponly=True, samesite="lax", secure=secure(request),
        path="/auth/oidc",
    )
    return response


def _refused(request: Request, status: int, text: str, detail: str = "") -> HTMLResponse:
    return _message(request, status, "Sign-in refused", text,
                    detail or "Start again from the page you wanted to open.")


@router.get("/auth/oidc/callback")
async def oidc_callback(
    request: Request, code: str | None = None, state: str | None = None,
    error: str | None = None, error_description: str | None = None,
) -> Response:
    settings: Settings = request.app.state.settings
    if not settings.oidc_enabled:
        return _message(request, 404, "Not found",
                        "Sign-in with an identity provider is not configured on this server.")
    if not state or len(state) > 200:
        return _refused(request, 400, "The identity provider's answer carries no state.")
    cookie = _pending_cookie(state)
    now = time.time()
    for used, until in list(_USED_STATES.items()):
        if until < now:
            del _USED_STATES[used]
    if state in _USED_STATES:
        return _refused(request, 400, "This sign-in answer was already used (a replayed state).")
    raw = request.cookies.get(cookie)
    try:
        pending: Any = _pending(request).loads(raw, max_age=PENDING_SECONDS) if raw else None
    except BadSignature:
        pending = None
    if not isinstance(pending, dict) or pending.get("s") != state:
        return _refused(request, 400, "This sign-in answer does not match a sign-in started "
                        "in this browser (unknown or expired state).")
    _USED_STATES[state] = now + PENDING_SECONDS
    if error:
        text = f"The identity provider said: {error}"
        if error_description:
            text += f" ({error_description[:300]})"
        response = _refused(request, 401, text + ".")
        response.delete_cookie(cookie, path="/auth/oidc")
        return response
    if not code or len(code) > 2000:
        return _refused(request, 400, "The identity provider's answer carries no code.")
    oidc = provider(request)
    try:
        token = await oidc.redeem(code, str(pending["v"]))
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise OidcError("the provider sent no ID token (is `openid` among oidc_scopes?)")
        claims = await oidc.verify(id_token, audience=settings.oidc_client_id,
                                   nonce=str(pending["n"]))
    except OidcError as exc:
        response = _refused(request, 401, f"The sign-in could not be verified: {exc.message}.")
        response.delete_cookie(cookie, path="/auth/oidc")
        return response
    data = oidc_sessions.session_data(settings, claims)
    done = RedirectResponse(root(request) + safe_next(pending.get("next")), status_code=303,
                            headers={"Cache-Control": "no-store"})
    done.delete_cookie(cookie, path="/auth/oidc")
    oidc_sessions.set_session(done, request, data)
    return done


# ------------------------------------------------------------------ sign-out
@router.post("/auth/signout")
async def signout(request: Request) -> Response:
    _, ok = await posted_form(request, SIGNOUT_PURPOSE)
    if not ok:
        return _message(request, 403, "Sign-out refused",
                        "This sign-out form is stale or came from another site.",
                        "Reload the page and sign out from there.")
    response = _message(request, 200, "Signed out",
                        "You are signed out of parkgate on this browser.",
                        "Your identity provider may still have you signed in; sign out "
                        "there too on a shared computer.", kind="info")
    oidc_sessions.clear_session(response, request)
    # The API-key page sessions end too (one button signs out of everything).
    response.delete_cookie("pg_inbox", path="/inbox")
    for path in ("/audit", "/codec"):
        response.delete_cookie("pg_audit", path=path)
    return response
