"""Cedar policies beside the YAML policy: who may run what, checked against a schema.

A deployment lists ``.cedar`` files in ``policy_files``. Every call is one Cedar
request with fixed names (docs/POLICY.md): principal ``Parkgate::Agent::"<key>"``
in ``Parkgate::Project::"<project>"``, action ``Parkgate::Action::"call"``,
resource ``Parkgate::Tool::"<tool>"``. A matching ``forbid`` denies; matching
``permit`` policies give a mode through their annotations (``@mode``,
``@approvers``, ``@quorum``), the strictest of them wins; no permit says nothing
(the YAML policy decides). The caller combines this with the YAML decision,
strictest wins. Evaluation is pure (no I/O), so it runs inside classification.

cedarpy is imported where a policy is parsed, checked or evaluated: a
deployment without ``policy_files`` never loads it (issue 41).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parkgate.models import SideEffects, ToolDefinition
from parkgate.rules.policy import PolicyDecision, PolicyError, strictness

NAMESPACE = "Parkgate"
#: The one action every call is.
ACTION = {"type": f"{NAMESPACE}::Action", "id": "call"}
#: Modes a permit policy's ``@mode`` may name (a refusal is a ``forbid``).
PERMIT_MODES = ("auto", "prompt", "prompt_once")
#: The rule prefix of a decision a Cedar policy made (``cedar:<id>``).
RULE_PREFIX = "cedar:"
#: The principal of a call no key submitted (the in-process local dispatcher,
#: calls recorded before submitters were kept).
UNKNOWN_KEY = "unknown"

_EVAL_ERROR = re.compile(r"error while evaluating policy `([^`]*)`")
_NAMED = re.compile(r"`([^`]+)`")


class CedarError(PolicyError):
    """A policy file does not load (message: ``file:line: what``)."""


@dataclass(frozen=True)
class CedarPolicy:
    """One policy of a file: its id, where it is, and what a match means."""

    id: str
    file: str
    line: int
    effect: str
    mode: str
    approvers: tuple[str, ...]
    quorum: int
    text: str
    body: dict[str, Any] = field(repr=False, hash=False, compare=False)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class CedarRequest:
    """What a policy sees of one call (built by the classifier)."""

    key_name: str
    project: str
    tool: ToolDefinition
    agent: str
    tool_input: Mapping[str, Any]
    programs: frozenset[str]
    paths: frozenset[str]
    inside_workspace: bool
    session: str
    workspace: str
    hour: int
    #: Budget name -> {used, limit, remaining}, whole units (parkgate.rules.budgets).
    budgets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def split_policies(text: str) -> list[tuple[int, str]]:
    """Each policy statement of a file with the line it starts on (1-based).

    Statements end at a ``;`` outside strings; ``//`` comments are skipped, so
    a policy's text and line start at its first annotation or effect keyword.
    """
    out: list[tuple[int, str]] = []
    start = 0
    first_line: int | None = None
    line = 1
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch == '"':
            if first_line is None:
                first_line, start = line, i
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif ch == ";":
            if first_line is not None:
                out.append((first_line, text[start:i + 1]))
            first_line = None
        elif not ch.isspace() and first_line is None:
            first_line, start = line, i
        i += 1
    if first_line is not None:  # a statement without its `;`
        out.append((first_line, text[start:]))
    return out


def _resolve_approvers(raw: str, where: str, approvers: Iterable[str],
                       groups: Mapping[str, Iterable[str]]) -> tuple[str, ...]:
    """``@approvers("group:oncall, alice")`` as known approver names."""
    known = set(approvers)
    names: list[str] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        if entry.startswith("group:"):
            group = entry.removeprefix("group:")
            if group not in groups:
                raise CedarError(f"{where}: @approvers: unknown group {group!r}")
            members = list(groups[group])
        else:
            members = [entry]
        for name in members:
            if name not in known:
                raise CedarError(f"{where}: @approvers: unknown approver {name!r}")
            if name not in names:
                names.append(name)
    return tuple(names)


def _policy(file: str, line: int, text: str, approvers: Iterable[str],
            groups: Mapping[str, Iterable[str]]) -> CedarPolicy:
    import cedarpy

    where = f"{file}:{line}"
    try:
        parsed = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as exc:
        raise CedarError(f"{where}: {' '.join(str(exc).split())}") from None
    if parsed.get("templates"):
        raise CedarError(f"{where}: policy templates are not supported")
    body = next(iter(parsed["staticPolicies"].values()))
    notes: dict[str, str] = body.get("annotations") or {}
    policy_id = notes.get("id") or f"{os.path.basename(file)}:{line}"
    effect = body["effect"]
    mode = notes.get("mode", "prompt")
    if effect == "permit" and mode not in PERMIT_MODES:
        raise CedarError(f"{where}: @mode({mode!r}) must be one of {', '.join(PERMIT_MODES)} "
                         "(refuse with a forbid policy)")
    names = _resolve_approvers(notes.get("approvers", ""), where, approvers, groups)
    try:
        quorum = int(notes.get("quorum", "1"))
    except ValueError:
        raise CedarError(f"{where}: @quorum must be a whole number") from None
    if not 1 <= quorum <= 20 or quorum > max(1, len(names)):
        raise CedarError(f"{where}: @quorum({quorum}) must be 1..20 and at most the "
                         f"{len(names)} approvers the policy names")
    return CedarPolicy(id=policy_id, file=file, line=line, effect=effect, mode=mode,
                       approvers=names, quorum=quorum, text=text, body=body)


class CedarPolicies:
    """The loaded policy files: decide one call, check against a schema."""

    def __init__(self, policies: list[CedarPolicy]) -> None:
        import cedarpy

        self.policies = policies
        self.by_id = {p.id: p for p in policies}
        document = {"staticPolicies": {p.id: p.body for p in policies},
                    "templates": {}, "templateLinks": []}
        self._set = cedarpy.PolicySet.from_json_str(json.dumps(document))

    @classmethod
    def load(cls, paths: Iterable[str | os.PathLike[str]], *, approvers: Iterable[str] = (),
             groups: Mapping[str, Iterable[str]] | None = None) -> CedarPolicies:
        """Parse every file; CedarError (file:line) for the first that does not
        parse, an unknown approver, a bad annotation or a duplicate @id."""
        names = list(approvers)
        policies: list[CedarPolicy] = []
        seen: dict[str, str] = {}
        for path in paths:
            file = str(path)
            try:
                text = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                raise CedarError(f"{file}: cannot read policy file: {exc.strerror}") from None
            for line, chunk in split_policies(text):
                policy = _policy(file, line, chunk, names, groups or {})
                if policy.id in seen:
                    raise CedarError(f"{policy.where}: @id({policy.id!r}) is already used "
                                     f"at {seen[policy.id]}")
                seen[policy.id] = policy.where
                policies.append(policy)
        return cls(policies)

    # ------------------------------------------------------------ checking
    def check(self, schema: str, tools: Iterable[str],
              fields: Iterable[str] | None = None) -> list[str]:
        """Every problem of every policy against ``schema``: ``file:line: what``.

        The Cedar validator catches unknown attributes, types and actions; tool
        names are checked here (a schema cannot list entity ids that carry
        attributes), so ``Parkgate::Tool::"shel"`` is an error too, and so is
        ``context.input has comand`` when no tool has that field (``fields``):
        Cedar types it false, which would make the policy silently never match.
        """
        import cedarpy

        known = set(tools)
        input_names = None if fields is None else set(fields)
        problems: list[str] = []
        for policy in self.policies:
            result = cedarpy.validate_policies(policy.text, schema)
            for error in result.errors:
                message = " ".join(error.error.split())
                message = re.sub(r"^for policy `[^`]*`, ", "", message)
                problems.append(f"{policy.file}:{_line_of(policy, message)}: "
                                f"[{policy.id}] {message}")
            for name in sorted(_input_tests(policy.body) - (input_names or set())
                               if input_names is not None else ()):
                line = _line_of(policy, f"`{name}`")
                problems.append(f"{policy.file}:{line}: [{policy.id}] no tool has the input "
                                f"field `{name}` (context.input has {name} is always false)")
            for tool in sorted(_tool_ids(policy.body) - known):
                line = _line_of(policy, f"`{tool}`")
                problems.append(f"{policy.file}:{line}: [{policy.id}] unknown tool {tool!r}")
        return problems

    # ------------------------------------------------------------ deciding
    def decide(self, request: CedarRequest) -> PolicyDecision | None:
        """The Cedar decision for one call, or None when no policy matched.

        A matching forbid denies; so does a forbid that could not be evaluated
        on this call (fail closed). Matching permits: the strictest mode wins.
        """
        import cedarpy

        result = cedarpy.is_authorized(_request(request), self._set, _entities(request))
        reasons = [r for r in result.diagnostics.reasons if r in self.by_id]
        broken = [m.group(1) for e in result.diagnostics.errors
                  if (m := _EVAL_ERROR.search(e)) and m.group(1) in self.by_id
                  and self.by_id[m.group(1)].effect == "forbid"]
        forbids = [r for r in reasons if self.by_id[r].effect == "forbid"]
        if forbids or broken:
            ids = forbids or broken
            note = "" if forbids else " (could not be evaluated on this call)"
            return PolicyDecision(mode="deny",
                                  rule=", ".join(f"{RULE_PREFIX}{i}" for i in ids) + note)
        permits = [self._decision(self.by_id[r]) for r in reasons
                   if self.by_id[r].effect == "permit"]
        if not permits:
            return None
        return max(permits, key=strictness)

    @staticmethod
    def _decision(policy: CedarPolicy) -> PolicyDecision:
        return PolicyDecision(mode=policy.mode,  # type: ignore[arg-type]
                              rule=f"{RULE_PREFIX}{policy.id}",
                              approvers=list(policy.approvers), quorum=policy.quorum)


def _line_of(policy: CedarPolicy, message: str) -> int:
    """The line of ``policy`` that shows the first name the message quotes
    (an attribute, a tool), else the policy's first line."""
    lines = policy.text.split("\n")
    for name in _NAMED.findall(message):
        word = re.compile(rf"(?<![\w]){re.escape(name.strip(chr(34)))}(?![\w])")
        for index, text in enumerate(lines):
            if word.search(text.split("//")[0]):
                return policy.line + index
    return policy.line


def _tool_ids(node: Any) -> set[str]:
    """Ids of every ``Parkgate::Tool`` entity a policy names."""
    found: set[str] = set()
    if isinstance(node, dict):
        if node.get("type") == f"{NAMESPACE}::Tool" and isinstance(node.get("id"), str):
            found.add(node["id"])
        for value in node.values():
            found |= _tool_ids(value)
    elif isinstance(node, list):
        for value in node:
            found |= _tool_ids(value)
    return found


def _input_tests(node: Any) -> set[str]:
    """Attributes a policy tests with ``context.input has <name>``."""
    found: set[str] = set()
    if isinstance(node, dict):
        test = node.get("has")
        if isinstance(test, dict) and test.get("left") == {
                ".": {"left": {"Var": "context"}, "attr": "input"}}:
            found.add(str(test.get("attr")))
        for value in node.values():
            found |= _input_tests(value)
    elif isinstance(node, list):
        for value in node:
            found |= _input_tests(value)
    return found


def cedar_value(value: Any) -> Any:
    """A JSON value as Cedar takes it: lists become sets, and what Cedar has no
    type for (null, fractions, integers past 64 bits) is left out."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, list):
        return [v for v in (cedar_value(x) for x in value) if v is not None]
    if isinstance(value, dict):
        return {str(k): v for k, v in ((k, cedar_value(x)) for k, x in value.items())
                if v is not None}
    return None


def _request(request: CedarRequest) -> dict[str, Any]:
    return {
        "principal": {"type": f"{NAMESPACE}::Agent", "id": request.key_name},
        "action": ACTION,
        "resource": {"type": f"{NAMESPACE}::Tool", "id": request.tool.name},
        "context": {
            "input": cedar_value(dict(request.tool_input)),
            "programs": sorted(request.programs),
            "paths": sorted(request.paths),
            "inside_workspace": request.inside_workspace,
            "session": request.session,
            "workspace": request.workspace,
            "project": request.project,
            "hour": request.hour,
            "budgets": {name: dict(state) for name, state in request.budgets.items()},
        },
    }


def _entities(request: CedarRequest) -> list[dict[str, Any]]:
    project = {"type": f"{NAMESPACE}::Project", "id": request.project}
    return [
        {"uid": project, "attrs": {}, "parents": []},
        {"uid": {"type": f"{NAMESPACE}::Agent", "id": request.key_name}, "attrs": {},
         "parents": [project]},
        {"uid": {"type": f"{NAMESPACE}::Tool", "id": request.tool.name},
         "attrs": {"side_effects": request.tool.side_effects.value,
                   "hosted": not request.tool.client_executed, "agent": request.agent},
         "parents": []},
    ]


# ---------------------------------------------------------------- schema
_SCALARS = {"string": "String", "integer": "Long", "boolean": "Bool"}
_ATTR_NAME = re.compile(r'^[^"\\\x00-\x1f]{1,200}$')


def _cedar_type(schema: Any) -> str | None:
    """The Cedar type of a JSON-schema property, None when Cedar has none."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        item = _cedar_type(schema.get("items"))
        return f"Set<{item}>" if item is not None and not item.startswith("Set") else None
    return None


def input_fields(tools: Iterable[ToolDefinition]) -> dict[str, str]:
    """``context.input``'s attributes: every top-level input field of every tool
    with a Cedar type; a field two tools type differently is left out."""
    fields: dict[str, str | None] = {}
    for tool in tools:
        props = tool.input_schema.get("properties") or {}
        if not isinstance(props, dict):
            continue
        for name, prop in props.items():
            if not _ATTR_NAME.match(str(name)):
                continue
            kind = _cedar_type(prop)
            if name in fields and fields[name] != kind:
                fields[name] = None
            else:
                fields.setdefault(name, kind)
    return {name: kind for name, kind in sorted(fields.items()) if kind is not None}


def deployment_schema(tools: Iterable[ToolDefinition], budgets: Iterable[str] = ()) -> str:
    """The Cedar schema of this deployment's request model (docs/POLICY.md);
    `budgets`: the settings' budget names (`context.budgets.NAME`)."""
    attrs = "".join(f"      {json.dumps(name)}?: {kind},\n"
                    for name, kind in input_fields(tools).items())
    state = "{ used: Long, limit: Long, remaining: Long }"
    named = "".join(f"        {json.dumps(name)}: {state},\n" for name in sorted(budgets))
    classes = ", ".join(c.value for c in SideEffects)
    return (
        f"// parkgate's request model. side_effects is one of: {classes}.\n"
        f"namespace {NAMESPACE} {{\n"
        "  entity Project;\n"
        "  entity Agent in [Project];\n"
        "  entity Tool = { side_effects: String, hosted: Bool, agent: String };\n"
        "  type Input = {\n"
        f"{attrs}"
        "  };\n"
        "  action call appliesTo {\n"
        "    principal: [Agent],\n"
        "    resource: [Tool],\n"
        "    context: {\n"
        "      input: Input,\n"
        "      programs: Set<String>,\n"
        "      paths: Set<String>,\n"
        "      inside_workspace: Bool,\n"
        "      session: String,\n"
        "      workspace: String,\n"
        "      project: String,\n"
        "      hour: Long,\n"
        "      budgets: {\n"
        f"{named}"
        "      },\n"
        "    },\n"
        "  };\n"
        "}\n"
    )
