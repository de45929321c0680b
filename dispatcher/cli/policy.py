"""`parkgate policy`: check Cedar policy files against the deployment's schema.

`check` names every problem with its file and line (exit 2 when there is one),
`schema` prints the Cedar schema the policies are checked against
(docs/POLICY.md). `parkgate serve` refuses to start on what `check` refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from parkgate.cli.common import ConfigError, console, err_console, load_settings, one_line
from parkgate.settings import Settings

if TYPE_CHECKING:
    from parkgate.registry import ToolRegistry

NAME = "policy"
app = typer.Typer(help="Check Cedar policies and print their schema.", no_args_is_help=True)


def _registry() -> ToolRegistry:
    """The workers' registry (built-in and composed tools): what policies may name."""
    from parkgate.runtime.worker import build_registry

    return build_registry()


def require_valid_policies(settings: Settings) -> None:
    """ConfigError (exit 2, one line) when a `policy_files` entry does not load
    or check: what `parkgate serve` runs before it starts anything."""
    if not settings.policy_files:
        return
    from parkgate.rules.cedar import CedarError
    from parkgate.runtime.cedar_policy import load_cedar

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
    """Print the Cedar schema generated from this deployment's tools."""
    from parkgate.runtime.cedar_policy import policy_schema

    load_settings()
    typer.echo(policy_schema(_registry()), nl=False)
