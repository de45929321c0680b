"""`parkgate policy`: check Cedar policy files against the deployment's schema.

`check` names every problem with its file and line (exit 2 when there is one),
`schema` prints the Cedar schema the policies are checked against, `test`
runs a table of sample calls through the real classification (YAML and Cedar)
and exits 1 on a mismatch, `explain` classifies a recorded call again with
today's policies (docs/POLICY.md). `parkgate serve` refuses to start
on what `check` refuses.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.markup import escape
from rich.table import Table

from parkgate.cli.common import (
    EXIT_RUNTIME,
    CliError,
    ConfigError,
    console,
    describe_validation_error,
    err_console,
    load_settings,
    one_line,
    open_repository,
    run,
)
from parkgate.settings import Settings

if TYPE_CHECKING:
    from parkgate.pipeline import Pipeline
    from parkgate.registry import ToolRegistry
    from parkgate.verdicts import Verdict

NAME = "policy"
app = typer.Typer(help="Check Cedar policies and print their schema.", no_args_is_help=True)


def _registry() -> ToolRegistry:
    """The workers' registry (built-in and composed tools): what policies may name."""
    from parkgate.runtime.worker import build_registry

    return build_registry()


def require_valid_policies(settings: Settings) -> None:
    """ConfigError (exit 2, one line) when a `policy_files` entry does not load
    or check, or a budget names a tool the deployment does not have: what
    `parkgate serve` runs before it starts anything."""
    if not settings.policy_files and not settings.budgets:
        return
    from parkgate.rules.cedar import CedarError
    from parkgate.runtime.cedar_policy import budget_problems, load_cedar

    problems = budget_problems(settings, _registry())
    if problems:
        raise ConfigError(f"invalid budget: {problems[0]}")
    try:
        load_cedar(settings, _registry())
    except CedarError as exc:
        raise ConfigError(f"invalid Cedar policy: {one_line(str(exc))}") from exc


@app.command("check")
def check(
    files: list[Path] | None = typer.Argument(
        None, help="Policy files to check (default: the policy_files setting)."
    ),
) -> None:
    """Validate every policy against the schema: each problem with file and line."""
    from parkgate.rules.cedar import CedarError, CedarPolicies
    from parkgate.runtime.cedar_policy import check_policies

    settings = load_settings()
    paths = [p.expanduser() for p in (files or settings.policy_files)]
    if not paths:
        raise ConfigError("no policy files: name some, or set policy_files")
    try:
        policies = CedarPolicies.load(paths, approvers=settings.approvers,
                                      groups=settings.approver_groups)
    except CedarError as exc:
        raise ConfigError(one_line(str(exc))) from exc
    problems = check_policies(policies, _registry(), settings)
    for problem in problems:
        err_console.print(one_line(problem), markup=False)
    if problems:
        raise ConfigError(f"{len(problems)} problem(s) in {len(paths)} policy file(s)")
    console.print(f"policies OK: {len(policies.policies)} in {len(paths)} file(s)", markup=False)


@app.command("schema")
def schema() -> None:
    """Print the Cedar schema generated from this deployment's tools and budgets."""
    from parkgate.runtime.cedar_policy import policy_schema

    typer.echo(policy_schema(_registry(), load_settings()), nl=False)


class PolicyCase(BaseModel):
    """One sample call of a `policy test` table and the mode it must get."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    tool: str
    input: dict[str, Any] = Field(default_factory=dict)
    #: The submitting key's name and the session's project (the Cedar principal).
    key: str | None = None
    project: str | None = None
    #: The session's workspace (default: an empty temporary directory).
    workspace: str | None = None
    expect: Literal["auto", "prompt", "prompt_once", "deny"]
    #: When given: text the deciding rule must contain (`cedar:prod-kubectl`).
    rule: str | None = None
    approvers: list[str] | None = None
    quorum: int | None = None
    #: Budget state: units each named budget has used in the case's window
    #: (the rest: none); a call that does not fit parks or is denied.
    budgets: dict[str, float] = Field(default_factory=dict)


class PolicyCases(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cases: list[PolicyCase] = Field(min_length=1)


def _load_cases(path: Path) -> list[PolicyCase]:
    """The cases file; ConfigError (one line) when it cannot be read or is malformed."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: does not parse as YAML: {one_line(str(exc))}") from exc
    if isinstance(data, list):
        data = {"cases": data}
    try:
        return PolicyCases.model_validate(data).cases
    except ValidationError as exc:
        raise ConfigError(f"{path}: {describe_validation_error(exc)}") from exc


async def _classify(pipeline: Pipeline, case: PolicyCase, index: int,
                    workspace: str) -> tuple[Verdict, str]:
    """`case` through the pipeline as the classify activity runs it, with the
    case's budget state (and what the call would add to it, as text); a tool
    the registry lacks but Claude Code has is classified as its hook's call."""
    from parkgate.approvals.access import DEFAULT_PROJECT
    from parkgate.dialects.claude_code import BUILTIN_TOOLS, client_tool
    from parkgate.models import Session, ToolUseBlock, utcnow
    from parkgate.pipeline.budget_gate import charges_of, over_budget
    from parkgate.pipeline.classification import CLAUDE_CODE_TURN
    from parkgate.rules.budgets import overs, show_units, states, to_units
    from parkgate.rules.cedar import UNKNOWN_KEY
    from parkgate.verdicts import Deny

    client = None
    turn = "policy-test"
    if pipeline.registry.get(case.tool) is None and case.tool in BUILTIN_TOOLS:
        client = client_tool(case.tool, BUILTIN_TOOLS[case.tool]).definition()
        turn = CLAUDE_CODE_TURN
    session = Session(session_id=f"policy-test-{index}", turn_id=turn,
                      workspace_path=case.workspace or workspace)
    call = ToolUseBlock(id=f"case-{index}", name=case.tool, input=case.input)
    before = states(pipeline.budgets, {n: to_units(v) for n, v in case.budgets.items()})
    verdict = await pipeline.classify(call, session, client_tool=client, key_name=case.key,
                                      project=case.project, budgets=before)
    if isinstance(verdict, Deny) or not pipeline.budgets:
        return verdict, ""
    who = (session.session_id, case.project or DEFAULT_PROJECT, case.key or UNKNOWN_KEY)
    charges = charges_of(pipeline, verdict.prepared, who, utcnow())
    if isinstance(charges, Deny):
        return charges, ""
    shown = ", ".join(f"{c.budget} {before[c.budget].text()} +{show_units(c.amount)}"
                      for c in charges)
    return over_budget(pipeline, verdict, overs(pipeline.budgets, charges, before)), shown


def _outcome(verdict: Verdict) -> tuple[str, str, list[str], int]:
    """Mode, rule, approvers and quorum a verdict means."""
    from parkgate.verdicts import Deny, Execute

    if isinstance(verdict, Deny):
        return "deny", verdict.rule or "", [], 1
    if isinstance(verdict, Execute):
        return "auto", verdict.prepared.rule or "", [], 1
    info = verdict.info
    return info.mode, info.rule or "", list(info.approvers), info.quorum


def _mismatch(case: PolicyCase, mode: str, rule: str, approvers: list[str], quorum: int) -> bool:
    return (mode != case.expect
            or (case.rule is not None and case.rule not in rule)
            or (case.approvers is not None and sorted(case.approvers) != sorted(approvers))
            or (case.quorum is not None and case.quorum != quorum))


@app.command("test")
def test(
    cases_file: Path = typer.Argument(..., help="YAML: cases: [{tool, input, key, project, "
                                      "budgets?, expect, rule?, approvers?, quorum?}]"),
) -> None:
    """Classify each sample call with today's policies (YAML and Cedar); exit 1 with a
    table of the cases that do not get the expected mode."""
    from parkgate.rules.cedar import CedarError
    from parkgate.runtime.worker import build_pipeline

    settings = load_settings()
    cases = _load_cases(cases_file)
    for index, case in enumerate(cases):
        unknown = sorted(set(case.budgets) - set(settings.budgets))
        if unknown:
            raise ConfigError(f"{cases_file}: case {case.name or index + 1}: unknown "
                              f"budget {unknown[0]!r} (the settings' budgets: "
                              f"{', '.join(settings.budgets) or 'none'})")
    try:
        pipeline = build_pipeline(settings)
    except (CedarError, ValueError) as exc:
        raise ConfigError(f"invalid policy: {one_line(str(exc))}") from exc

    async def run_all() -> list[tuple[Verdict, str]]:
        with tempfile.TemporaryDirectory(prefix="parkgate-policy-test-") as workspace:
            return [await _classify(pipeline, case, i, workspace)
                    for i, case in enumerate(cases)]

    verdicts = run(run_all())
    table = Table(title="Cases that do not get the expected mode", title_justify="left")
    for column in ("case", "tool", "expected", "got", "rule", "budgets"):
        table.add_column(column, overflow="fold")
    failed = 0
    for index, (case, (verdict, spent)) in enumerate(zip(cases, verdicts, strict=True)):
        mode, rule, approvers, quorum = _outcome(verdict)
        if not _mismatch(case, mode, rule, approvers, quorum):
            continue
        failed += 1
        want = case.expect + (f" ({case.rule})" if case.rule else "")
        if case.approvers is not None or case.quorum is not None:
            want += f" by {case.approvers or approvers} quorum {case.quorum or quorum}"
        got = mode + (f" by {approvers} quorum {quorum}" if approvers else "")
        table.add_row(*(escape(cell) for cell in (case.name or f"#{index + 1}", case.tool,
                                                  want, got, rule, spent)))
    if failed:
        console.print(table)
        raise CliError(f"{failed} of {len(cases)} case(s) do not get the expected mode",
                       EXIT_RUNTIME)
    with_budgets = [(case, verdict, text) for case, (verdict, text)
                    in zip(cases, verdicts, strict=True) if text]
    if with_budgets:
        state = Table(title="Budget state", title_justify="left")
        for column in ("case", "budgets", "got"):
            state.add_column(column, overflow="fold")
        for case, verdict, text in with_budgets:
            state.add_row(*(escape(cell) for cell in (case.name or case.tool, text,
                                                      _outcome(verdict)[0])))
        console.print(state)
    console.print(f"all {len(cases)} case(s) get the expected mode", markup=False)


def _describe(verdict: Verdict) -> str:
    mode, rule, approvers, quorum = _outcome(verdict)
    who = f" by {', '.join(approvers)} (quorum {quorum})" if approvers else ""
    return f"{mode}{who}, rule {rule or '-'}"


@app.command("explain")
def explain(
    session: str = typer.Argument(
        ..., help="Session id, or the call's tool_use id alone (a unique prefix will do)."),
    tool_use_id: str | None = typer.Argument(
        None, help="The call's tool_use id (a unique prefix will do)."),
) -> None:
    """Classify a recorded call again with today's policies: what decided then,
    what would decide now (YAML and Cedar), and what the YAML policy alone says."""
    from parkgate.cli.calls import find_call
    from parkgate.client_tools.declared import definitions
    from parkgate.models import Session, ToolUseBlock
    from parkgate.rules.cedar import CedarError
    from parkgate.runtime.worker import build_pipeline

    settings = load_settings()
    try:
        pipeline = build_pipeline(settings)
    except (CedarError, ValueError) as exc:
        raise ConfigError(f"invalid policy: {one_line(str(exc))}") from exc

    async def replay() -> tuple[Any, Verdict, Verdict]:
        async with open_repository(settings) as repo:
            sid, tid = await find_call(repo, session, tool_use_id)
            call = await repo.get_call(sid, tid)
            record = await repo.get_session(sid)
            if call is None or record is None or call.input is None or not call.tool_name:
                raise CliError(f"call {tid!r} of session {sid!r} has no recorded input")
            submitter = await repo.get_submitter(sid, tid)
        client = None
        if pipeline.registry.get(call.tool_name) is None:
            client = next((d for d in definitions(record.client_tools)
                           if d.name == call.tool_name), None)
        block = ToolUseBlock(id=tid, name=call.tool_name, input=call.input)
        where = Session(session_id=sid, turn_id=call.turn_id or "explain",
                        workspace_path=record.workspace_path, kind=record.kind,  # type: ignore[arg-type]
                        worker_group=record.worker_group)
        who: dict[str, Any] = {"client_tool": client, "project": record.project,
                               "key_name": submitter.key_name if submitter else None}
        now = await pipeline.classify(block, where, **who)
        cedar, pipeline.cedar = pipeline.cedar, None
        try:
            yaml_only = await pipeline.classify(block, where, **who)
        finally:
            pipeline.cedar = cedar
        return call, now, yaml_only

    call, now, yaml_only = run(replay())
    table = Table(show_header=False, box=None, title=f"{call.tool_name} {call.tool_use_id}",
                  title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("decision", overflow="fold")
    table.add_row("then", escape(f"{call.verdict or '-'}, rule {call.rule or '-'}"))
    table.add_row("now", escape(_describe(now)))
    table.add_row("YAML alone", escape(_describe(yaml_only)))
    console.print(table)
