"""Remembered decisions: an approver's "allow this again" as a stored rule.

Pure (no I/O). The confirmation API accepts `remember` with an allow; the
activity that records the committed decision builds a `RememberedRule` with
`rule_for`; classification consults the active rules with `matching_rule`, and
a match runs the call with verdict rule `remembered:<id>`.

What a rule allows: the same tool with the same input (its hash), or, for a
tool with a shell `command` field, every line whose simple commands all start
with the remembered command's words, read by the one tokenizer the policy uses
(parkgate.rules.shellwords: as /bin/sh reads them). Chain-safe and fail-closed:
`git status; rm -rf /` never matches a `git status` rule, and a line the
tokenizer cannot read with certainty (substitutions, variables, redirections,
control characters such as `\r`), or whose command changes its environment
(`PATH=. git status`) or names a wrapper by a path, never matches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel

from parkgate.models import input_hash, input_hash_forms, is_input_hash
from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.shellwords import WrapperShape, parse

#: The input field a prefix rule matches (shell command lines).
COMMAND_FIELD = "command"
RULE_PREFIX = "remembered:"


class RememberedFields(BaseModel):
    """What a remembered rule says, as stored and as the API shows it."""

    scope: Literal["session", "workspace"]
    session_id: str
    workspace_path: str
    tool_name: str
    #: "input": same input hash; "prefix": command prefix + same other fields.
    match: Literal["input", "prefix"]
    input_hash: str
    command_prefix: str | None = None
    #: Who allowed it: the decider's name, principal and named-approver identity.
    created_by: str | None = None
    principal_id: str | None = None
    approver: str | None = None
    request_id: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None = None
    revoked_by: str | None = None


class RememberedRule(RememberedFields):
    """One stored rule (table `remembered_rules`)."""

    rule_id: str
    project: str = "default"

    @property
    def label(self) -> str:
        return f"{RULE_PREFIX}{self.rule_id}"

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and self.expires_at > now


def rule_id_for(request_id: str) -> str:
    """Deterministic per approval request: a retried record writes the same rule."""
    return hashlib.sha256(f"remembered:{request_id}".encode()).hexdigest()[:20]


def rest_hash(tool_name: str, tool_input: dict[str, Any]) -> str:
    """Hash of every field but the command (what a prefix rule keeps fixed)."""
    rest = {k: v for k, v in tool_input.items() if k != COMMAND_FIELD}
    return input_hash(tool_name, rest)


def rest_hash_forms(tool_name: str, tool_input: dict[str, Any]) -> tuple[str, ...]:
    """`rest_hash` and its form before RFC 8785 (what older rules hold)."""
    rest = {k: v for k, v in tool_input.items() if k != COMMAND_FIELD}
    return input_hash_forms(tool_name, rest)


def prefix_words(
    prefix: str, wrappers: Mapping[str, WrapperShape] | None = None
) -> tuple[str, ...] | None:
    """The words of ``prefix`` when it is one plain simple command, else None."""
    parsed = parse(prefix, wrappers)
    if len(parsed.commands) != 1 or not parsed.plain(parsed.commands[0]):
        return None
    return parsed.commands[0].written or None


def prefix_matches(
    line: str, prefix: str, wrappers: Mapping[str, WrapperShape] | None = None
) -> bool:
    """Every simple command of `line` starts with `prefix`'s words (chain-safe,
    fail-closed: an uncertain line or a changed environment never matches)."""
    want = prefix_words(prefix, wrappers)
    parsed = parse(line, wrappers)
    top = parsed.top
    if want is None or not top:
        return False
    return all(parsed.plain(c) and c.written[: len(want)] == want for c in top)


class RememberError(ValueError):
    """A remember request that cannot become a rule (message says why)."""


def rule_for(
    spec: RememberSpec,
    *,
    request_id: str,
    project: str,
    session_id: str,
    workspace_path: str,
    tool_name: str,
    tool_input: dict[str, Any],
    decided_at: datetime,
    created_by: str | None,
    principal_id: str | None,
    approver: str | None,
) -> RememberedRule:
    """The rule an allow with `remember` creates (prefix rule for shell lines)."""
    command = tool_input.get(COMMAND_FIELD)
    prefix: str | None = None
    if isinstance(command, str):
        prefix = spec.command_prefix or command
        if not prefix_matches(command, prefix):
            raise RememberError(
                "command_prefix must be a word prefix of the approved command, "
                "which must be a plain command line (no substitutions or redirections)"
            )
    elif spec.command_prefix is not None:
        raise RememberError("command_prefix is only for tools with a command field")
    return RememberedRule(
        rule_id=rule_id_for(request_id),
        project=project,
        scope=spec.scope,
        session_id=session_id,
        workspace_path=workspace_path,
        tool_name=tool_name,
        match="prefix" if prefix is not None else "input",
        input_hash=(
            rest_hash(tool_name, tool_input) if prefix is not None
            else input_hash(tool_name, tool_input)
        ),
        command_prefix=prefix,
        created_by=created_by,
        principal_id=principal_id,
        approver=approver,
        request_id=request_id,
        created_at=decided_at,
        expires_at=decided_at + timedelta(seconds=spec.ttl_seconds),
    )


def check_remember(spec: RememberSpec, tool_input: dict[str, Any]) -> str | None:
    """Why `spec` cannot apply to a call with this input (None when it can)."""
    command = tool_input.get(COMMAND_FIELD)
    if isinstance(command, str):
        if not prefix_matches(command, spec.command_prefix or command):
            return ("remember needs a plain command line (no chains of different "
                    "commands, substitutions or redirections), and command_prefix "
                    "must be a word prefix of it")
    elif spec.command_prefix is not None:
        return "command_prefix is only for tools with a command field"
    return None


def rule_matches(
    rule: RememberedRule,
    *,
    session_id: str,
    workspace_path: str,
    tool_name: str,
    tool_input: dict[str, Any],
    now: datetime,
    wrappers: Mapping[str, WrapperShape] | None = None,
) -> bool:
    """Whether `rule` allows this call now."""
    if not rule.active(now) or rule.tool_name != tool_name:
        return False
    if rule.scope == "session" and rule.session_id != session_id:
        return False
    if rule.scope == "workspace" and rule.workspace_path != workspace_path:
        return False
    # A rule remembered before RFC 8785 (parkgate.jcs) holds the json.dumps form.
    if rule.match == "input":
        return is_input_hash(rule.input_hash, tool_name, tool_input)
    command = tool_input.get(COMMAND_FIELD)
    return (
        isinstance(command, str)
        and rule.command_prefix is not None
        and rule.input_hash in rest_hash_forms(tool_name, tool_input)
        and prefix_matches(command, rule.command_prefix, wrappers)
    )


def matching_rule(
    rules: list[RememberedRule],
    *,
    session_id: str,
    workspace_path: str,
    tool_name: str,
    tool_input: dict[str, Any],
    now: datetime,
    approvers: list[str] | None = None,
    submitter_key: str | None = None,
    wrappers: Mapping[str, WrapperShape] | None = None,
) -> RememberedRule | None:
    """The oldest active rule that allows this call, if any.

    `approvers`: the call's named approvers; a rule counts only when made by one
    of them. `submitter_key`: "key:<id>" of the submitting key, whose own rules
    never approve its calls (separation of duties).
    """
    for rule in sorted(rules, key=lambda r: (r.created_at, r.rule_id)):
        if approvers and rule.approver not in approvers:
            continue
        if submitter_key is not None and rule.principal_id == submitter_key:
            continue
        if rule_matches(rule, session_id=session_id, workspace_path=workspace_path,
                        tool_name=tool_name, tool_input=tool_input, now=now,
                        wrappers=wrappers):
            return rule
    return None
