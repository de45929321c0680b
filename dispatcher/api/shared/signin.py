"""What every signed-in page offers: the provider's sign-in link, the key form, and
the sign-out button.

The approval pages, the inbox and the audit pages all sign people in the same
way; routes_oidc holds the routes these links and forms go to.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from parkgate.api.shared import csrf, oidc_sessions
from parkgate.settings import Settings

#: The CSRF purpose of the sign-out form (`POST /auth/signout`).
SIGNOUT_PURPOSE = "signout"


def root(request: Request) -> str:
    """The app's mount path, without a trailing slash."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def secure(request: Request) -> bool:
    """Cookies are Secure when the public URL is https."""
    settings: Settings = request.app.state.settings
    return settings.public_base_url.startswith("https://")


def login_url(request: Request, next_path: str) -> str:
    """The provider's sign-in, coming back to `next_path`."""
    from urllib.parse import urlencode

    return f"{root(request)}/auth/oidc/login?{urlencode({'next': next_path})}"


def signin_options(request: Request, next_url: str) -> dict[str, Any]:
    """What a sign-in page (inbox or audit) offers: the provider's sign-in, the
    key form, or both."""
    settings: Settings = request.app.state.settings
    return {"oidc_url": login_url(request, next_url) if settings.oidc_enabled else None,
            "key_form": settings.api_key_signin}


def signout_form(request: Request) -> tuple[str, str]:
    """(cookie nonce, form token) for a page's sign-out button."""
    nonce, token = csrf.issue(request.app.state.secret, SIGNOUT_PURPOSE,
                              request.cookies.get(csrf.cookie_name(SIGNOUT_PURPOSE)))
    return nonce, token


def set_signout_cookie(response: Response, request: Request, nonce: str) -> None:
    response.set_cookie(
        csrf.cookie_name(SIGNOUT_PURPOSE), nonce, max_age=csrf.MAX_AGE_SECONDS, httponly=True,
        # Path "/": every signed-in page reads it back to keep one nonce (open tabs stay valid).
        samesite="strict", secure=secure(request), path="/",
    )


def signout_context(request: Request, response_cookies: list[str]) -> dict[str, Any]:
    """Template values for the sign-out button of a signed-in person's page;
    the nonce to set is appended to `response_cookies`."""
    person = oidc_sessions.signed_in(request)
    if person is None:
        return {}
    nonce, token = signout_form(request)
    response_cookies.append(nonce)
    return {"person": person.principal.name, "signout_csrf": token}
