"""Confirmation policy: auto / prompt / prompt_once / deny, and the rule that decided.

Layers, from least to most specific: per-class ``default``; trusted workspaces
(lower the bar to auto, except classes listed in ``trusted_workspace_overrides``);
``per_tool``; argument ``rules`` matched on the validated input. The most
specific layer that applies decides — except that ``deny`` from any applicable
layer always wins. Every decision names its rule, e.g. ``default.WRITE=prompt``.

Shell argument rules are matched per simple command: ``git status; rm -rf ~``
is two simple commands and an allow rule for ``git status`` matches only the
first, so the line does not match. Command substitution, process substitution,
backticks and redirections make a line opaque: it never matches an auto/prompt
rule (a deny rule still matches when any visible simple command matches).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from parkgate.models import Session, SideEffects, ToolDefinition

Mode = Literal["auto", "prompt", "prompt_once", "deny"]
MODES: tuple[str, ...] = ("auto", "prompt", "prompt_once", "deny")

#: Input fields matched per simple command (shell command lines).
COMMAND_FIELDS: frozenset[str] = frozenset({"command", "check"})


class PolicyError(ValueError):
    """The policy document is malformed (message names the offending key)."""


# --------------------------------------------------------------------------
# Shell simple-command splitter
# --------------------------------------------------------------------------


def split_simple_commands(line: str) -> list[str] | None:
    """Split a shell line into simple commands, or None if it is opaque.

    Separators outside quotes: ``;`` ``&&`` ``||`` ``|`` ``&`` and newlines.
    Opaque (None): backticks, ``$(``, ``<(``/``>(``, redirections (``<`` ``>``),
    here-docs, unterminated quotes, NUL bytes. Empty segments are dropped.
    """
    if "\x00" in line:
        return None
    segments: list[str] = []
    current: list[str] = []
    i, n = 0, len(line)
    quote: str | None = None
    while i < n:
        ch = line[i]
        if quote == "'":
            current.append(ch)
            if ch == "'":
                quote = None
            i += 1
            continue
        if quote == '"':
            if ch == "\\" and i + 1 < n:
                current.append(line[i : i + 2])
                i += 2
                continue
            if ch == "`" or line.startswith("$(", i):
                return None
            current.append(ch)
            if ch == '"':
                quote = None
            i += 1
            continue
        # outside quotes
        if ch == "\\":
            if i + 1 < n and line[i + 1] == "\n":  # line continuation
                i += 2
                continue
            current.append(line[i : i + 2])
            i += 2
            continue
        if ch in "'\"":
            quote = ch
            current.append(ch)
            i += 1
            continue
        if ch == "`" or line.startswith("$(", i) or ch in "<>":
            return None
        if ch in ";\n|&":
            segments.append("".join(current))
            current = []
            # swallow doubled operators (&&, ||, ;;)
            if i + 1 < n and line[i + 1] == ch and ch in "|&;":
                i += 1
            i += 1
            continue
        current.append(ch)
        i += 1
    if quote is not None:
        return None
    segments.append("".join(current))
    return [s.strip() for s in segments if s.strip()]


def _tokens(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


# --------------------------------------------------------------------------
# Policy model
# --------------------------------------------------------------------------


class ArgumentRule(BaseModel):
    """One entry of ``tool_confirmation.rules``.

    ``tool`` names the tool; ``mode`` the outcome. Every other key is a condition
    on the validated input: ``<field>: value`` (exact; a command line compares
    tokens per simple command; a path field compares the workspace-relative
    path) or ``<field>_pattern: regex`` (full match). All conditions must hold.
    """

    model_config = ConfigDict(extra="allow")

    tool: str
    mode: Mode
    #: Who decides (prompt rules): approver names and `group:<name>` entries,
    #: resolved against the settings' approvers by `with_approvers`.
    approvers: list[str] = Field(default_factory=list)
    #: How many distinct named approvers must allow (any deny denies).
    quorum: int = Field(default=1, ge=1, le=20)
    #: Let the key that submitted the call decide it (recorded in the audit).
    self_approval: bool = False
    #: While parked: notify again after this long, and notify `escalate_to`
    #: (approver names, `group:<name>`) after `escalate_after_seconds`.
    remind_after_seconds: int | None = Field(default=None, ge=1)
    escalate_after_seconds: int | None = Field(default=None, ge=1)
    escalate_to: list[str] = Field(default_factory=list)

    def conditions(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def describe(self, index: int) -> str:
        conds = " ".join(f"{k} {v!r}" for k, v in self.conditions().items())
        return f"rules[{index}] ({self.tool}{' ' + conds if conds else ''} -> {self.mode})"

    @model_validator(mode="after")
    def _escalation(self) -> ArgumentRule:
        if bool(self.escalate_to) != (self.escalate_after_seconds is not None):
            raise ValueError("escalate_to and escalate_after_seconds go together")
        return self

    @field_validator("approvers", "escalate_to", mode="after")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or not isinstance(name, str):
                raise ValueError("approver names must be non-empty strings")
        return value


def _class_key(value: Any) -> SideEffects:
    try:
        return SideEffects(str(value).lower())
    except ValueError:
        raise ValueError(
            f"unknown side-effect class {value!r} (expected one of "
            f"{[c.value.upper() for c in SideEffects]})"
        ) from None


def _default_modes() -> dict[SideEffects, Mode]:
    return {
        SideEffects.NONE: "auto",
        SideEffects.READ: "auto",
        SideEffects.WRITE: "prompt",
        SideEffects.EXECUTE: "prompt",
        SideEffects.NETWORK: "prompt",
    }


class PolicyDecision(BaseModel):
    """The outcome of a policy lookup: a mode and the rule that decided it."""

    mode: Mode
    rule: str
    #: From the deciding argument rule: named approvers (resolved), quorum and
    #: whether the submitter may approve its own call.
    approvers: list[str] = Field(default_factory=list)
    quorum: int = 1
    self_approval: bool = False
    #: Reminder and escalation timers of the deciding rule (see ArgumentRule).
    remind_after_seconds: int | None = None
    escalate_after_seconds: int | None = None
    escalate_to: list[str] = Field(default_factory=list)


class ConfirmationPolicy(BaseModel):
    """The spec's ``tool_confirmation`` mapping, validated."""

    model_config = ConfigDict(extra="forbid")

    default: dict[SideEffects, Mode] = Field(default_factory=_default_modes)
    per_tool: dict[str, Mode] = Field(default_factory=dict)
    trusted_workspaces: list[str] = Field(default_factory=list)
    trusted_workspace_overrides: dict[SideEffects, Mode] = Field(default_factory=dict)
    rules: list[ArgumentRule] = Field(default_factory=list)

    @field_validator("default", "trusted_workspace_overrides", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {_class_key(k): v for k, v in value.items()}
        return value

    @field_validator("default", mode="after")
    @classmethod
    def _fill_defaults(cls, value: dict[SideEffects, Mode]) -> dict[SideEffects, Mode]:
        return {**_default_modes(), **value}

    @field_validator("rules", mode="after")
    @classmethod
    def _check_patterns(cls, value: list[ArgumentRule]) -> list[ArgumentRule]:
        for i, rule in enumerate(value):
            for key, cond in rule.conditions().items():
                if key.endswith("_pattern"):
                    try:
                        re.compile(str(cond))
                    except re.error as exc:
                        raise ValueError(f"rules[{i}].{key}: invalid regex: {exc}") from None
        return value

    # ------------------------------------------------------------- loading
    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> ConfirmationPolicy:
        """From the ``tool_confirmation`` mapping (or a document wrapping it)."""
        data = dict(data or {})
        if set(data) == {"tool_confirmation"}:
            data = dict(data["tool_confirmation"] or {})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise PolicyError(f"tool_confirmation.{where}: {first['msg']}") from None

    @classmethod
    def from_yaml(cls, text: str) -> ConfirmationPolicy:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyError(f"policy YAML does not parse: {exc}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise PolicyError("policy YAML must be a mapping (tool_confirmation: ...)")
        return cls.from_mapping(data)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ConfirmationPolicy:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PolicyError(f"cannot read policy file {path}: {exc.strerror}") from None
        return cls.from_yaml(text)

    def with_approvers(
        self, approvers: Iterable[str], groups: Mapping[str, Iterable[str]]
    ) -> ConfirmationPolicy:
        """The policy with every rule's `approvers` resolved to known names.

        `group:<name>` expands to its members; PolicyError for an unknown name or
        group, or a quorum larger than the approvers a rule names.
        """
        known = set(approvers)
        resolved: list[ArgumentRule] = []

        def names_of(index: int, key: str, entries: list[str]) -> list[str]:
            names: list[str] = []
            for entry in entries:
                if entry.startswith("group:"):
                    group = entry.removeprefix("group:")
                    if group not in groups:
                        raise PolicyError(f"rules[{index}].{key}: unknown group {group!r}")
                    members = list(groups[group])
                else:
                    members = [entry]
                for name in members:
                    if name not in known:
                        raise PolicyError(f"rules[{index}].{key}: unknown approver {name!r}")
                    if name not in names:
                        names.append(name)
            return names

        for index, rule in enumerate(self.rules):
            names = names_of(index, "approvers", rule.approvers)
            escalate = names_of(index, "escalate_to", rule.escalate_to)
            if rule.quorum > max(1, len(names)):
                raise PolicyError(
                    f"rules[{index}].quorum: {rule.quorum} is more than the "
                    f"{len(names)} approvers the rule names"
                )
            resolved.append(rule.model_copy(update={"approvers": names, "escalate_to": escalate}))
        return self.model_copy(update={"rules": resolved})

    # ------------------------------------------------------------ deciding
    def trusted_workspace_for(self, workspace_path: str) -> str | None:
        """The configured trusted entry containing ``workspace_path``, if any."""
        real = os.path.realpath(os.path.expanduser(workspace_path))
        for entry in self.trusted_workspaces:
            root = os.path.realpath(os.path.expanduser(entry))
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return entry
        return None

    def decide(
        self,
        definition: ToolDefinition,
        tool_input: dict[str, Any],
        session: Session,
        *,
        relative_paths: dict[str, str] | None = None,
    ) -> PolicyDecision:
        """The mode for this call and the rule that decided it.

        ``relative_paths`` maps path fields to their workspace-relative form
        (computed by the pipeline's scope check) for path conditions.
        """
        cls_ = definition.side_effects
        label = cls_.value.upper()
        candidates: list[PolicyDecision] = [
            PolicyDecision(mode=self.default[cls_], rule=f"default.{label}={self.default[cls_]}")
        ]
        trusted = self.trusted_workspace_for(session.workspace_path)
        if trusted is not None:
            mode: Mode = self.trusted_workspace_overrides.get(cls_, "auto")
            candidates.append(
                PolicyDecision(mode=mode, rule=f"trusted_workspace:{trusted} {label}={mode}")
            )
        if definition.name in self.per_tool:
            mode = self.per_tool[definition.name]
            candidates.append(PolicyDecision(mode=mode, rule=f"per_tool.{definition.name}={mode}"))
        deny_rule: PolicyDecision | None = None
        allow_rule: PolicyDecision | None = None
        for index, rule in enumerate(self.rules):
            if rule.tool != definition.name:
                continue
            if rule.mode == "deny":
                if deny_rule is None and _matches(
                    rule, tool_input, relative_paths, any_segment=True
                ):
                    deny_rule = PolicyDecision(mode="deny", rule=rule.describe(index))
            elif allow_rule is None and _matches(
                rule, tool_input, relative_paths, any_segment=False
            ):
                allow_rule = PolicyDecision(
                    mode=rule.mode, rule=rule.describe(index), approvers=list(rule.approvers),
                    quorum=rule.quorum, self_approval=rule.self_approval,
                    remind_after_seconds=rule.remind_after_seconds,
                    escalate_after_seconds=rule.escalate_after_seconds,
                    escalate_to=list(rule.escalate_to),
                )
        if deny_rule is not None:
            return PolicyDecision(mode="deny", rule=f"deny:{deny_rule.rule}")
        for cand in reversed(candidates):  # most specific first
            if cand.mode == "deny":
                return PolicyDecision(mode="deny", rule=f"deny:{cand.rule.split('=')[0]}")
        if allow_rule is not None:
            return allow_rule
        return candidates[-1]


def _matches(
    rule: ArgumentRule,
    tool_input: dict[str, Any],
    relative_paths: dict[str, str] | None,
    *,
    any_segment: bool,
) -> bool:
    """Whether every condition of ``rule`` holds for ``tool_input``.

    ``any_segment`` (deny rules): a command condition holds if ANY simple
    command matches (an opaque line is split on substitutions too). Otherwise EVERY simple command
    must match and an opaque line never matches.
    """
    for key, expected in rule.conditions().items():
        is_pattern = key.endswith("_pattern")
        field = key[: -len("_pattern")] if is_pattern else key
        if field not in tool_input:
            return False
        value = tool_input[field]
        if relative_paths and field in relative_paths:
            value = relative_paths[field]
        if not isinstance(value, str):
            if is_pattern or value != expected:
                return False
            continue
        if field in COMMAND_FIELDS:
            if not _command_matches(value, expected, is_pattern, any_segment):
                return False
        elif not _value_matches(value, expected, is_pattern):
            return False
    return True


def _value_matches(value: str, expected: Any, is_pattern: bool) -> bool:
    if is_pattern:
        return re.fullmatch(str(expected), value) is not None
    return value == str(expected)


def _segment_matches(segment: str, expected: Any, is_pattern: bool) -> bool:
    if is_pattern:
        return re.fullmatch(str(expected), segment) is not None
    got, want = _tokens(segment), _tokens(str(expected))
    return got is not None and want is not None and got == want


def _command_matches(line: str, expected: Any, is_pattern: bool, any_segment: bool) -> bool:
    segments = split_simple_commands(line)
    if any_segment:
        if segments is None:
            segments = [s.strip() for s in re.split(r"[;&|\n`()<>]+|\$\(", line) if s.strip()]
        return any(_segment_matches(s, expected, is_pattern) for s in segments)
    if not segments:
        return False
    return all(_segment_matches(s, expected, is_pattern) for s in segments)
