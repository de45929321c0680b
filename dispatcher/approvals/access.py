"""Who may do what: roles, the principal behind a request, and the decision rules.

Pure (no I/O): the HTTP layer asks these functions, the store only keeps the
facts (a key's project and roles, who submitted a call). Projects isolate:
a key never sees another project's sessions, calls or events.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel

from parkgate.approvals.identity import oidc_principal_id

DEFAULT_PROJECT = "default"
PROJECT_PATTERN = r"^[A-Za-z0-9_.\-]{1,100}$"


class Role(StrEnum):
    AGENT = "agent"  # register sessions, submit, cancel, read its project's calls
    APPROVER = "approver"  # decide parked calls
    AUDITOR = "auditor"  # the audit query API and the audit pages
    ADMIN = "admin"  # keys and configuration; sees named approvers' personal links


ROLES: tuple[str, ...] = tuple(r.value for r in Role)
#: What a key held before roles existed (every role).
ALL_ROLES: tuple[str, ...] = tuple(sorted(ROLES))


class RoleError(ValueError):
    """An unknown role name."""


def normalize_roles(roles: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated role names; RoleError for an unknown one."""
    out: set[str] = set()
    for raw in roles:
        name = raw.strip().lower()
        if name not in ROLES:
            raise RoleError(f"unknown role {raw!r} (expected one of {', '.join(ROLES)})")
        out.add(name)
    if not out:
        raise RoleError("a key needs at least one role")
    return sorted(out)


class Principal(BaseModel):
    """The authenticated caller of a request: an API key (id, name, project,
    roles), or a person signed in through OIDC (`oidc` set: `key_id` is their
    subject, roles and projects come from their groups)."""

    key_id: str
    name: str
    project: str = DEFAULT_PROJECT
    roles: list[str]
    #: A signed-in person: {"issuer", "subject", "email"} as the provider asserted.
    oidc: dict[str, str] | None = None
    #: The named approver a signed-in person acts as (settings.approver_for_oidc).
    approver: str | None = None
    #: The projects a signed-in person's groups grant ("*": all); None for a key.
    projects: list[str] | None = None

    @property
    def principal_id(self) -> str:
        if self.oidc is not None:
            return oidc_principal_id(self.key_id)
        return f"key:{self.key_id}"

    @property
    def label(self) -> str:
        """How a record names this caller (who cancelled a call, say): the
        key's name, or the signed-in person's email."""
        if self.oidc is not None:
            return f"person '{self.oidc.get('email') or self.name}'"
        return f"key '{self.name}'"

    def sees(self, project: str) -> bool:
        """Whether this principal's scope covers `project`."""
        if self.projects is None:
            return project == self.project
        return "*" in self.projects or project in self.projects

    def has(self, *roles: Role) -> bool:
        return any(r.value in self.roles for r in roles)


class Submitter(BaseModel):
    """The key that submitted a call (first submission wins)."""

    key_id: str
    key_name: str


def is_self(principal: Principal, submitter: Submitter | None) -> bool:
    """Whether `principal` is the one that submitted the call."""
    return (submitter is not None and principal.oidc is None
            and submitter.key_id == principal.key_id)


def may_decide(
    principal: Principal,
    submitter: Submitter | None,
    *,
    self_approval: bool,
    approvers: Iterable[str] = (),
    approver_keys: dict[str, str] | None = None,
) -> str | None:
    """Why `principal` may not decide this request (None when it may).

    A decider needs the approver role; the submitter never decides its own
    call unless the rule allows self-approval; a request with named approvers
    is decided only by keys mapped to one of them (`approver_keys`: key name ->
    approver name).
    """
    if not principal.has(Role.APPROVER):
        if principal.oidc is not None:
            return "your groups grant no approver role"
        return "this API key has no approver role"
    if is_self(principal, submitter) and not self_approval:
        return "the key that submitted a call cannot decide it (separation of duties)"
    named = list(approvers)
    if named and approver_for(principal, named, approver_keys) is None:
        return "this request is decided by its named approvers: " + ", ".join(named)
    return None


def approver_for(
    principal: Principal, named: Iterable[str], approver_keys: dict[str, str] | None
) -> str | None:
    """The named approver this key acts as, if it is one of `named`."""
    if principal.oidc is not None:
        name = principal.approver
    else:
        name = (approver_keys or {}).get(principal.name)
    return name if name is not None and name in set(named) else None
