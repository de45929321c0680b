"""Signing in to the approver inbox: an approver key's session, or the
identity provider's; and signing out.

An API key with the approver role signs in with a form (a signed HttpOnly
cookie names the key; a revoked key or a lost role ends the session); a person
signed in through OIDC whose groups grant the approver role needs no form.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from itsdangerous import URLSafeTimedSerializer

from parkgate.api.people.inbox import Viewer
from parkgate.api.people.inbox_pages import message, page, set_csrf
from parkgate.api.shared import csrf, oidc_sessions, signin
from parkgate.api.shared.deps import principal_of
from parkgate.api.shared.key_sessions import posted_form, sign_in, signed_in_key
from parkgate.api.shared.signin import root, secure
from parkgate.approvals.access import Role
from parkgate.settings import Settings

router = APIRouter(include_in_schema=False)

COOKIE = "pg_inbox"
_SESSION_SALT = "parkgate.inbox-session.v1"
SESSION_SECONDS = 12 * 3600
_LOGIN_PURPOSE = "inbox-login"


async def key_viewer(request: Request) -> Viewer | None:
    """The approver of a signed-in inbox session (an API key, else a person
    signed in through OIDC whose groups grant the approver role), or None."""
    key = await signed_in_key(
        request, cookie=COOKIE, salt=_SESSION_SALT, max_age=SESSION_SECONDS, role=Role.APPROVER
    )
    if key is not None:
        return Viewer(principal=principal_of(key))
    person = oidc_sessions.person_with(request, Role.APPROVER)
    return None if person is None else Viewer(principal=person.principal)


def signed_out_page(request: Request) -> Response:
    """A page without an approver session: the sign-in (OIDC or key form), or
    why a signed-in person may not use the inbox."""
    settings: Settings = request.app.state.settings
    person = oidc_sessions.signed_in(request)
    if person is not None:
        response = message(request, 403, "No approver role",
                           f"You are signed in as {person.principal.name}, but your groups "
                           "grant no approver role.",
                           "Ask an admin to add you to a group that oidc_group_roles maps "
                           "to the approver role.")
        return response
    if settings.oidc_enabled and not settings.api_key_signin:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(signin.login_url(request, target), status_code=303)
    return _login_redirect(request)


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(
        f"{root(request)}/inbox/login?{urlencode({'next': target})}", status_code=303
    )


def _safe_next(value: str | None) -> str:
    """Only /inbox paths (no open redirect, no personal-link detour)."""
    if value and value.startswith("/inbox") and not value.startswith(("//", "/inbox/p/")):
        return value
    return "/inbox"


def _session_serializer(request: Request) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(request.app.state.secret, salt=_SESSION_SALT)


@router.get("/inbox/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str | None = None) -> Response:
    nonce, token = csrf.issue(request.app.state.secret, _LOGIN_PURPOSE,
                              request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)))
    response = page(request, "inbox_login.html", csrf=token, next=_safe_next(next),
                    error=None, **signin.signin_options(request, _safe_next(next)))
    set_csrf(response, request, _LOGIN_PURPOSE, nonce)
    return response



@router.post("/inbox/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    if not request.app.state.settings.api_key_signin:
        return message(request, 403, "API-key sign-in is off",
                       "Sign in with your identity provider instead.")
    signed = await sign_in(request, purpose=_LOGIN_PURPOSE, role=Role.APPROVER,
                           no_role="This API key has no approver role; the inbox needs one.")
    next_url, key = _safe_next(signed.next), signed.key
    if key is None:
        nonce, token = csrf.issue(request.app.state.secret, _LOGIN_PURPOSE,
                                  request.cookies.get(csrf.cookie_name(_LOGIN_PURPOSE)))
        response = page(request, "inbox_login.html", signed.status, csrf=token, next=next_url,
                        error=signed.error, **signin.signin_options(request, next_url))
        set_csrf(response, request, _LOGIN_PURPOSE, nonce)
        return response
    redirect = RedirectResponse(root(request) + next_url, status_code=303)
    redirect.set_cookie(
        COOKIE, _session_serializer(request).dumps({"kid": key.id}), max_age=SESSION_SECONDS,
        httponly=True, samesite="lax", secure=secure(request), path="/inbox",
    )
    return redirect


@router.post("/inbox/logout")
async def logout(request: Request) -> Response:
    _, ok = await posted_form(request, "inbox-logout")
    if not ok:
        return message(request, 403, "Sign-out refused",
                       "This sign-out form is stale or came from another site.",
                       "Reload the inbox and sign out from there.")
    redirect = RedirectResponse(f"{root(request)}/inbox/login", status_code=303)
    redirect.delete_cookie(COOKIE, path="/inbox")
    return redirect
