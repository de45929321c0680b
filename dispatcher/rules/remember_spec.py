"""The `remember` part of a decision: scope, time to live, command prefix.

Kept apart from parkgate.rules.remembered (matching) because it travels in workflow
payloads: pydantic and the standard library only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator

if TYPE_CHECKING:
    from parkgate.verdicts import ApprovalInfo

#: Bounds of `remember.ttl_seconds`: a minute to thirty days.
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 30 * 24 * 3600


class RememberSpec(BaseModel):
    """What the approver asked to remember (the confirmation API's `remember`)."""

    scope: Literal["session", "workspace"]
    ttl_seconds: int = Field(ge=MIN_TTL_SECONDS, le=MAX_TTL_SECONDS)
    #: Shell tools: the command prefix to allow (tokens of the approved
    #: command's start). Default: the whole approved command.
    command_prefix: str | None = Field(default=None, max_length=4000)
    #: The named approver the decider acts as: set by the API from the key,
    #: never from a request body (a rule counts only for calls it may decide).
    approver: str | None = Field(default=None, max_length=200)

    @field_validator("command_prefix")
    @classmethod
    def _prefix(cls, value: str | None) -> str | None:
        # Deliberately lenient: this model is read back from workflow histories,
        # so it must accept every prefix it ever accepted. What a prefix may be
        # (one plain command, read by parkgate.rules.shellwords) is checked where a
        # rule is made: parkgate.rules.remembered.check_remember and rule_for.
        if value is not None and not value.strip():
            raise ValueError("command_prefix must hold at least one word")
        return value


def remember_for(
    remember: RememberSpec | None, approver: str | None, info: ApprovalInfo | None
) -> RememberSpec | None:
    """What an allow remembers: the approver's `remember`, else, for a request
    parked by a `prompt_once` rule (the spec's mode: remember for the session),
    the session for MAX_TTL_SECONDS. Quorum requests and sub-calls never."""
    if info is None or info.quorum > 1 or info.parent_tool_use_id:
        return None
    if remember is not None:
        return remember
    if info.mode == "prompt_once":
        return RememberSpec(scope="session", ttl_seconds=MAX_TTL_SECONDS, approver=approver)
    return None
