"""A person signed in through OIDC: the session cookie, and what their claims grant.

The session is a signed (itsdangerous, the app's secret), HttpOnly,
SameSite=Lax cookie holding what the provider asserted (issuer, subject,
email, groups) and a random session id; its signature's timestamp is when the
provider last asserted those claims. It ends after `oidc_session_seconds`, on
sign-out (the id is refused by this process from then on), and a decision
needs claims younger than `oidc_decision_max_age_seconds`: an older session is
renewed through the provider first, which re-reads the groups, so a person
removed from a group loses the right at their next decision. Roles and projects
are computed from the groups on every request, so a grant removed from
`oidc_group_roles` applies at once (a group mapped later, from the next sign-in).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from parkgate.approvals.access import DEFAULT_PROJECT, Principal, Role
from parkgate.settings import Settings

COOKIE = "pg_session"
SALT = "parkgate.oidc-session.v1"
#: Session ids signed out in this process (id -> when its cookie would expire).
_SIGNED_OUT: dict[str, float] = {}


@dataclass(frozen=True)
class Person:
    """A signed-in person, and how old the provider's assertion is."""

    principal: Principal
    session_id: str
    #: Seconds since the provider asserted these claims (sign-in or renewal).
    age: float

    @property
    def oidc(self) -> dict[str, str]:
        assert self.principal.oidc is not None
        return self.principal.oidc


def _serializer(secret: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret, salt=SALT)


def _groups(claims: dict[str, Any], name: str) -> list[str]:
    raw = claims.get(name)
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [g for g in raw if isinstance(g, str)]


def session_data(settings: Settings, claims: dict[str, Any]) -> dict[str, Any]:
    """What the cookie keeps of a validated ID token's claims."""
    email = claims.get("email") if isinstance(claims.get("email"), str) else None
    return {
        "iss": str(claims["iss"]), "sub": str(claims["sub"]), "email": email,
        # An address the provider says is unverified never maps to an approver.
        "ev": claims.get("email_verified") is not False,
        "name": claims.get("name") if isinstance(claims.get("name"), str) else None,
        # Only groups oidc_group_roles knows: a provider may list hundreds, and
        # a cookie holds 4 KiB. (A group mapped later counts from the next sign-in.)
        "groups": [g for g in _groups(claims, settings.oidc_groups_claim)
                   if g in settings.oidc_group_roles],
        "sid": secrets.token_urlsafe(18),
    }


def principal_for(settings: Settings, data: dict[str, Any]) -> Principal:
    """The principal a person's claims make: roles and projects from their groups
    (`oidc_group_roles`), the named approver by subject or verified email."""
    roles: set[str] = set()
    projects: list[str] = []
    for group in data.get("groups") or []:
        grant = settings.oidc_group_roles.get(group)
        if grant is None:
            continue
        roles.update(grant.roles)
        projects += [p for p in grant.projects if p not in projects]
    subject, email = str(data["sub"]), data.get("email")
    name = (email if settings.oidc_identity_claim == "email" and email else subject)
    approver = settings.approver_for_oidc(subject, email if data.get("ev") else None)
    concrete = [p for p in projects if p != "*"]
    return Principal(
        key_id=subject, name=str(name)[:200], roles=sorted(roles),
        project=concrete[0] if concrete else DEFAULT_PROJECT,
        oidc={"issuer": str(data["iss"]), "subject": subject, **({"email": email} if email
                                                                    else {})},
        approver=approver, projects=projects,
    )


def set_session(response: Response, request: Request, data: dict[str, Any]) -> None:
    settings: Settings = request.app.state.settings
    response.set_cookie(
        COOKIE, _serializer(request.app.state.secret).dumps(data),
        max_age=settings.oidc_session_seconds, httponly=True, samesite="lax",
        secure=settings.public_base_url.startswith("https://"), path="/",
    )


def clear_session(response: Response, request: Request) -> None:
    """Sign out: the cookie goes, and this process refuses its id from now on."""
    settings: Settings = request.app.state.settings
    raw = request.cookies.get(COOKIE)
    if raw:
        try:
            data = _serializer(request.app.state.secret).loads(raw)
        except BadSignature:
            data = None
        if isinstance(data, dict) and isinstance(data.get("sid"), str):
            now = time.time()
            for sid, until in list(_SIGNED_OUT.items()):
                if until < now:
                    del _SIGNED_OUT[sid]
            _SIGNED_OUT[data["sid"]] = now + settings.oidc_session_seconds
    response.delete_cookie(COOKIE, path="/")


def signed_in(request: Request) -> Person | None:
    """The person whose session cookie this request carries (None: nobody, or
    expired, tampered, signed out, or from another issuer)."""
    settings: Settings = request.app.state.settings
    raw = request.cookies.get(COOKIE)
    if not raw or not settings.oidc_enabled:
        return None
    try:
        data, signed_at = _serializer(request.app.state.secret).loads(
            raw, max_age=settings.oidc_session_seconds, return_timestamp=True)
    except (SignatureExpired, BadSignature):
        return None
    if not isinstance(data, dict) or data.get("iss") != settings.oidc_issuer:
        return None
    if not isinstance(data.get("sub"), str) or data.get("sid") in _SIGNED_OUT:
        return None
    age = max(0.0, time.time() - signed_at.timestamp())
    return Person(principal_for(settings, data), str(data.get("sid")), age)


def person_with(request: Request, *roles: Role) -> Person | None:
    """The signed-in person when they hold one of `roles`."""
    person = signed_in(request)
    if person is None or not person.principal.has(*roles):
        return None
    return person


def fresh_enough(request: Request, person: Person) -> bool:
    """Whether the person's claims are young enough to decide with."""
    settings: Settings = request.app.state.settings
    return person.age <= settings.oidc_decision_max_age_seconds
