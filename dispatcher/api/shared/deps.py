"""What the HTTP layer needs, and the Annotated dependencies that hand it out.

`ApiDeps` is built once by whoever runs the app (`parkgate serve`, tests) and
passed to `create_app`; handlers receive its parts through `Annotated`
dependencies, so nothing in the routers reaches for globals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from temporalio.client import Client

from parkgate.api.shared.errors import ApiError
from parkgate.api.shared.ratelimit import RateLimiter
from parkgate.approvals.access import Principal, Role
from parkgate.durable.dispatcher import DurableDispatcher
from parkgate.registry import ToolRegistry
from parkgate.settings import Settings
from parkgate.store.repository import Repository
from parkgate.store.results import ApiKeyRecord


@dataclass
class ApiDeps:
    """The long-lived objects the API talks to."""

    repo: Repository
    #: Connected to the namespace the workers poll (calls are started here).
    temporal: Client
    #: The same registry the workers use (tool definitions per session).
    registry: ToolRegistry
    #: How often an SSE stream polls the store when it has caught up.
    sse_poll_seconds: float = 0.5
    #: Optional: a DurableDispatcher to use (e.g. with eager_start=True when a
    #: worker shares this process); by default one is built over `temporal`.
    dispatcher: DurableDispatcher | None = None


def _deps(request: Request) -> ApiDeps:
    deps: ApiDeps = request.app.state.deps
    return deps


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _repo(request: Request) -> Repository:
    return _deps(request).repo


def _secret(request: Request) -> str:
    secret: str = request.app.state.secret
    return secret


DepsDep = Annotated[ApiDeps, Depends(_deps)]
SettingsDep = Annotated[Settings, Depends(_settings)]
RepoDep = Annotated[Repository, Depends(_repo)]
SecretDep = Annotated[str, Depends(_secret)]

_bearer = HTTPBearer(auto_error=False, description="An API key from `parkgate keys create`.")


async def _api_key(
    request: Request,
    repo: RepoDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKeyRecord:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise ApiError(401, "unauthorized", "missing API key: send `Authorization: Bearer <key>`")
    record = await repo.verify_api_key(credentials.credentials)
    if record is None:
        raise ApiError(401, "unauthorized", "invalid or revoked API key")
    _rate_limit(request, record.id, f"API key {record.name!r}")
    return record


def _rate_limit(request: Request, caller_id: str, who: str) -> None:
    """429 with Retry-After once `caller_id` is over its request rate."""
    limiter: RateLimiter = request.app.state.rate_limiter
    wait = limiter.check(caller_id)
    if wait is not None:
        raise ApiError(
            429, "rate_limited",
            f"too many requests from {who}; retry after {wait:.1f} s",
            {"retry_after_seconds": round(wait, 3)},
            headers={"Retry-After": RateLimiter.retry_after(wait)},
        )


ApiKeyDep = Annotated[ApiKeyRecord, Depends(_api_key)]


def principal_of(record: ApiKeyRecord) -> Principal:
    return Principal(key_id=record.id, name=record.name, project=record.project,
                     roles=list(record.roles))


def _looks_like_jwt(credential: str) -> bool:
    return credential.startswith("eyJ") and credential.count(".") == 2


async def _principal(
    request: Request,
    repo: RepoDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller: an API key, or a person's provider-issued JWT (oidc_bearer_tokens)."""
    settings: Settings = request.app.state.settings
    token = credentials.credentials if credentials is not None else ""
    if settings.oidc_enabled and settings.oidc_bearer_tokens and _looks_like_jwt(token):
        from parkgate.api.shared.oidc_bearer import bearer_principal

        principal = await bearer_principal(request, token)
        _rate_limit(request, principal.principal_id, repr(principal.name))
        return principal
    return principal_of(await _api_key(request, repo, credentials))


def _require(*roles: Role) -> object:
    """A dependency: the request's principal, 403 unless it holds one of `roles`."""

    async def dep(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
        if not principal.has(*roles):
            names = " or ".join(r.value for r in roles)
            who = (f"signed-in person {principal.name!r}" if principal.oidc is not None
                   else f"API key {principal.name!r}")
            raise ApiError(
                403, "forbidden",
                f"{who} lacks the {names} role for this request",
                {"required_roles": [r.value for r in roles], "roles": principal.roles},
            )
        return principal

    return Depends(dep)


#: Register sessions, submit, cancel, list tools.
AgentDep = Annotated[Principal, _require(Role.AGENT)]
#: Read a project's sessions, calls and events (any role).
ReaderDep = Annotated[Principal, _require(Role.AGENT, Role.APPROVER, Role.AUDITOR, Role.ADMIN)]
#: Decide parked calls.
ApproverDep = Annotated[Principal, _require(Role.APPROVER)]
#: The audit query API.
AuditorDep = Annotated[Principal, _require(Role.AUDITOR)]
#: Share a project's workspaces with other projects.
AdminDep = Annotated[Principal, _require(Role.ADMIN)]
