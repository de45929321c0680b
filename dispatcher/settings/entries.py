"""The nested entries of Settings: webhooks, named approvers, identity-provider groups."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parkgate.approvals.access import DEFAULT_PROJECT, PROJECT_PATTERN


class Webhook(BaseModel):
    """A notification target for parked calls."""

    url: str
    kind: str = "generic"  # "generic" JSON or "slack"
    headers: dict[str, str] = Field(default_factory=dict)


class Approver(BaseModel):
    """A named approver: who gets a personal link for requests that name them."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = None
    #: The API key name that decides as this approver through the API.
    key: str | None = None
    #: The Slack member id (U...) whose Approve/Deny clicks decide as this approver.
    slack_user_id: str | None = None
    #: The OIDC subject (`sub`) that signs in as this approver; without it a
    #: signed-in person whose verified email equals `email` does.
    oidc_subject: str | None = None
    #: The projects whose requests this approver decides through Slack, personal
    #: links and personal inbox links (docs/APPROVERS.md); "*" means every project.
    projects: list[str] = Field(default_factory=lambda: [DEFAULT_PROJECT], min_length=1)

    @field_validator("projects", mode="after")
    @classmethod
    def _check_projects(cls, value: list[str]) -> list[str]:
        for name in value:
            if name != "*" and not re.fullmatch(PROJECT_PATTERN, name):
                raise ValueError(f"{name!r} is not a project name (or \"*\" for every project)")
        return value

    def decides_in(self, project: str) -> bool:
        """Whether this approver decides requests of `project`."""
        return "*" in self.projects or project in self.projects


class GroupGrant(BaseModel):
    """What membership of one identity-provider group grants (`oidc_group_roles`)."""

    model_config = ConfigDict(extra="forbid")

    #: Human roles only (approver, auditor, admin): a person is never an agent.
    roles: list[str] = Field(default_factory=list)
    #: Projects the roles hold in; "*" is every project.
    projects: list[str] = Field(default_factory=lambda: ["default"])

    @field_validator("roles", mode="after")
    @classmethod
    def _human_roles(cls, value: list[str]) -> list[str]:
        allowed = {"approver", "auditor", "admin"}
        bad = [r for r in value if r not in allowed]
        if bad:
            raise ValueError(f"oidc_group_roles: {bad} (a group grants approver, auditor "
                             "or admin)")
        return value
