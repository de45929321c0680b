"""Confirmation policy: auto / prompt / prompt_once / deny, and the rule that decided.

Layers, from least to most specific: per-class ``default``; trusted workspaces
(lower the bar to auto, except classes listed in ``trusted_workspace_overrides``);
``per_tool``; argument ``rules`` matched on the validated input. Matching
argument rules beat the layers, and among them the strictest wins (deny >
named approvers/quorum > prompt > prompt_once > self-approval > auto); a
``deny`` from any layer always wins. Every decision names its rule, e.g.
``default.WRITE=prompt``.

Command fields are read by the one tokenizer, parkgate.rules.shellwords, as /bin/sh
reads them, and judged per simple command: a strict rule (deny, prompt, named
approvers) applies when ANY command matches it, by any reading (a program by
its basename, commands inside substitutions and ``sh -c``); a loosening rule
(auto, prompt_once, self-approval) only when the line is read with certainty
and EVERY command matches it as written. A command no rule judged falls to the
layers, and the strictest of all of it decides. Shell rules also tighten the
command fields of tools composed of shell (``atomic_edit_checked``'s check).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from parkgate.models import Session, SideEffects, ToolDefinition
from parkgate.rules.shellwords import DEFAULT_WRAPPERS, Command, CommandLine, WrapperShape, parse

Mode = Literal["auto", "prompt", "prompt_once", "deny"]
MODES: tuple[str, ...] = ("auto", "prompt", "prompt_once", "deny")

#: Input fields matched per simple command (shell command lines).
COMMAND_FIELDS: frozenset[str] = frozenset({"command", "check"})
#: The built-in shell tool: its rules also judge the command fields of tools
#: composed of it (``atomic_edit_checked``'s ``check``), tightening only.
SHELL_TOOL = "shell"


class PolicyError(ValueError):
    """The policy document is malformed (message names the offending key)."""


# --------------------------------------------------------------------------
# Shell simple-command splitter (kept for callers; the rules use parkgate.rules.shellwords)
# --------------------------------------------------------------------------


def split_simple_commands(line: str) -> list[str] | None:
    """The source text of each simple command of a certain line, else None.

    Read by the one tokenizer (parkgate.rules.shellwords): None when the line
    depends on the run (substitutions, redirections, expansions, unbalanced
    quotes, control characters...). Empty commands are dropped.
    """
    parsed = parse(line)
    if not parsed.certain:
        return None
    return [c.raw for c in parsed.top if c.raw]


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

    @property
    def loosening(self) -> bool:
        """Auto, prompt_once (remembered after one allow) and self-approval
        rules let calls through without another person: they judge only lines
        read with certainty, and only when every command of the line matches."""
        return self.mode in ("auto", "prompt_once") or self.self_approval

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


def strictness(decision: PolicyDecision) -> tuple[int, int, int, int]:
    """Order of strictness: deny > named approvers (more quorum, no self-approval
    first) > prompt > prompt_once > self-approval > auto."""
    if decision.mode == "deny":
        level = 3
    elif decision.mode == "auto":
        level = 0
    else:
        level = 2 if decision.approvers else 1
    return (
        level,
        decision.quorum if decision.approvers else 0,
        0 if decision.self_approval else 1,
        1 if decision.mode == "prompt" else 0,
    )


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
    #: Programs that run another program (``nice -n 5 cmd``) and their option
    #: shapes, merged over parkgate.rules.shellwords.DEFAULT_WRAPPERS; null drops one.
    command_wrappers: dict[str, WrapperShape | None] = Field(default_factory=dict)

    def wrappers(self) -> dict[str, WrapperShape]:
        """The wrappers the command tokenizer unwraps under this policy."""
        merged: dict[str, WrapperShape | None] = {**DEFAULT_WRAPPERS, **self.command_wrappers}
        return {name: shape for name, shape in merged.items() if shape is not None}

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
                elif key in COMMAND_FIELDS and isinstance(cond, str):
                    parsed = parse(cond)
                    if not parsed.certain or len(parsed.commands) != 1:
                        raise ValueError(
                            f"rules[{i}].{key}: {cond!r} must be one simple command without "
                            "substitutions, variables, redirections or chains (use "
                            f"{key}_pattern for a family of commands)"
                        )
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
        import yaml  # a policy file only: a worker configured by settings does not load it

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
        base = candidates[-1]
        layer_deny = next((c for c in reversed(candidates) if c.mode == "deny"), None)
        wrappers = self.wrappers()
        lines = {
            field: parse(value, wrappers)
            for field, value in tool_input.items()
            if field in COMMAND_FIELDS and isinstance(value, str)
        }
        # Shell rules also judge the command fields of tools that run them in a shell.
        runs_shell = definition.name != SHELL_TOOL and SHELL_TOOL in (definition.composed_of or [])
        matched: list[PolicyDecision] = []
        covered: set[tuple[str, int]] = set()
        covers_all = False
        for index, rule in enumerate(self.rules):
            label = rule.describe(index)
            hit: set[tuple[str, int]] | _AllCommands | None
            if rule.tool == definition.name:
                hit = _hits(rule, tool_input, relative_paths, lines)
            elif runs_shell and rule.tool == SHELL_TOOL and not rule.loosening:
                hit = None
                for field, line in lines.items():
                    got = _hits(rule, {"command": tool_input[field]}, None, {"command": line})
                    if got is not None:
                        hit = _ALL if isinstance(got, _AllCommands) else {
                            (field, i) for _, i in got}
                        label = f"{label} on {field}"
                        break
            else:
                continue
            if hit is None:
                continue
            if isinstance(hit, _AllCommands):
                covers_all = True
            else:
                covered |= hit
            matched.append(_decision(rule, label))
        denied = next((d for d in matched if d.mode == "deny"), None)
        if denied is not None:
            return PolicyDecision(mode="deny", rule=f"deny:{denied.rule}")
        if layer_deny is not None:
            return PolicyDecision(mode="deny", rule=f"deny:{layer_deny.rule.split('=')[0]}")
        top = {(field, i) for field, line in lines.items()
               for i, command in enumerate(line.commands) if not command.nested}
        if not covers_all and (not matched or not top <= covered
                               or any(not line.certain for line in lines.values())):
            # Some command no rule judged: the layers decide it (strictest wins).
            matched.append(base)
        return max(matched, key=strictness)  # the first of the strictest


class _AllCommands:
    """A rule without a command condition: it judges the whole call."""


_ALL = _AllCommands()


def _decision(rule: ArgumentRule, label: str) -> PolicyDecision:
    return PolicyDecision(
        mode=rule.mode, rule=label, approvers=list(rule.approvers),
        quorum=rule.quorum, self_approval=rule.self_approval,
        remind_after_seconds=rule.remind_after_seconds,
        escalate_after_seconds=rule.escalate_after_seconds,
        escalate_to=list(rule.escalate_to),
    )


def _hits(
    rule: ArgumentRule,
    tool_input: dict[str, Any],
    relative_paths: dict[str, str] | None,
    lines: dict[str, CommandLine],
) -> set[tuple[str, int]] | _AllCommands | None:
    """Which commands ``rule`` judges on this input: None when a condition
    fails, _ALL when it has no command condition, else (field, index) pairs.

    A strict rule (deny, prompt, named approvers) judges ANY command it
    matches, by every reading (nested, guessed, by basename or as written).
    A loosening rule matches only when the line is certain and EVERY command
    of it matches as written (no environment change, no wrapper by path).
    """
    hits: dict[str, set[int]] = {}
    for key, expected in rule.conditions().items():
        is_pattern = key.endswith("_pattern")
        field = key[: -len("_pattern")] if is_pattern else key
        if field not in tool_input:
            return None
        value = tool_input[field]
        if relative_paths and field in relative_paths:
            value = relative_paths[field]
        if not isinstance(value, str):
            if is_pattern or value != expected:
                return None
            continue
        if field in lines:
            got = _command_hits(lines[field], expected, is_pattern, rule.loosening)
            hits[field] = got if field not in hits else hits[field] & got
            if not hits[field]:
                return None
        elif not _value_matches(value, expected, is_pattern):
            return None
    if not hits:
        return _ALL
    return {(field, i) for field, found in hits.items() for i in found}


def _value_matches(value: str, expected: Any, is_pattern: bool) -> bool:
    if is_pattern:
        return re.fullmatch(str(expected), value) is not None
    return value == str(expected)


def _command_hits(line: CommandLine, expected: Any, is_pattern: bool, loosening: bool) -> set[int]:
    """Indexes of the commands of ``line`` that ``expected`` matches."""
    if loosening:
        top = [(i, c) for i, c in enumerate(line.commands) if not c.nested]
        if not top or not all(
            line.plain(c) and _one_matches(c, expected, is_pattern, as_written=True)
            for _, c in top
        ):
            return set()
        return {i for i, _ in top}
    return {
        i for i, c in enumerate(line.commands)
        if _one_matches(c, expected, is_pattern, as_written=False)
    }


@functools.lru_cache(maxsize=1024)
def _rule_command(expected: str) -> Command | None:
    """The one command an exact ``command:`` condition names (read once)."""
    want = parse(expected)
    return want.commands[0] if len(want.commands) == 1 else None


def _one_matches(command: Command, expected: Any, is_pattern: bool, *, as_written: bool) -> bool:
    """``command`` against one condition: a regex (full match of the rendered
    command) or an exact command (compared word by word)."""
    if is_pattern:
        texts = [command.written_text] if as_written else [command.text, command.written_text]
        return any(re.fullmatch(str(expected), t) is not None for t in texts)
    rule_command = _rule_command(str(expected))
    if rule_command is None:
        return False
    if as_written:
        return command.written == rule_command.written
    return command.words == rule_command.words or command.written == rule_command.written
