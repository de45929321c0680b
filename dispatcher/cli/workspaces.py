"""`parkgate workspaces list|grant|revoke`: which project holds which workspace path.

A workspace path belongs to the project that registered a session on it first
(parkgate.workspaces.ground); other projects get 403 there, inside it and around it. An
operator grants a path (and everything inside it) to another project here, or
reserves an unclaimed path for a project the same way; `revoke` takes a grant
back (`--owner` releases an owner's hold, so another project may claim it).
"""

from __future__ import annotations

import getpass
import re
from typing import Any

import typer
from rich.table import Table

from parkgate.approvals.access import PROJECT_PATTERN
from parkgate.cli.common import CliError, console, in_repository, load_settings
from parkgate.workspaces.ground import holding_path

app = typer.Typer(help="Which project holds which workspace path; grants.",
                  no_args_is_help=True)

_PROJECT = typer.Option(..., "--project", "-p", help="The project.")


def _path(raw: str) -> str:
    try:
        return holding_path(raw)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="PATH") from None


def _project(raw: str) -> str:
    if not re.fullmatch(PROJECT_PATTERN, raw):
        raise typer.BadParameter("must be 1-100 letters, digits, _ . or -",
                                 param_hint="--project")
    return raw


@app.command("list")
def list_holdings(
    project: str | None = typer.Option(None, "--project", "-p", help="Only this project's."),
) -> None:
    """Every workspace holding: path, project, owner or grant, by whom, since when."""
    holdings = in_repository(lambda repo: repo.workspace_holdings(project=project))
    table = Table(title=f"Workspace holdings ({len(holdings)})", title_justify="left")
    for name in ("path", "project", "kind", "by", "since (UTC)"):
        table.add_column(name, overflow="fold")
    for held in holdings:
        table.add_row(held.path, held.project, held.kind, held.created_by or "-",
                      held.created_at.strftime("%Y-%m-%d %H:%M:%S"))
    console.print(table)


@app.command("grant")
def grant(
    path: str = typer.Argument(..., help="An absolute path, as sessions store it (resolved)."),
    project: str = _PROJECT,
) -> None:
    """Let PROJECT register sessions on PATH and inside it (whoever holds it)."""
    where, who = _path(path), _project(project)
    created = in_repository(
        lambda repo: repo.grant_workspace(where, who, by=f"cli:{getpass.getuser()}"))
    console.print(f"granted {where} to project {who}" if created
                  else f"project {who} already holds {where}")


@app.command("revoke")
def revoke(
    path: str = typer.Argument(..., help="The granted path, exactly as listed."),
    project: str = _PROJECT,
    owner: bool = typer.Option(False, "--owner", help="Release the project's own hold on "
                               "PATH instead of a grant (another project may then claim it)."),
) -> None:
    """Take back PROJECT's grant of PATH: its new sessions there are refused (403);
    sessions already registered keep their workspace (cancel them if need be)."""
    where, who = _path(path), _project(project)
    if not in_repository(lambda repo: repo.release_workspace(
            where, who, kinds=("owner",) if owner else ("grant",))):
        what = f"does not own {where}" if owner else f"holds no grant of {where}"
        raise CliError(f"project {who} {what}", code=2)
    console.print(f"revoked project {who}'s {'hold' if owner else 'grant'} of {where}")


roots_app = typer.Typer(
    help="Workspace roots added on this host, on top of the workspace_roots setting: "
    "the running API sees a change at once (no restart).",
    no_args_is_help=True,
)
app.add_typer(roots_app, name="roots")


def _stack_dir() -> Any:
    """The data directory of the stack whose roots change; one line when none is there."""
    from parkgate.cli.common import no_stack_reason

    settings = load_settings()
    reason = no_stack_reason(settings)
    if reason is not None:
        raise CliError(reason)
    return settings


@roots_app.command("list")
def list_roots() -> None:
    """The roots sessions may have their workspace under (projects with their own
    project_workspace_roots use those instead)."""
    from parkgate.settings.paths import read_added_roots

    settings = _stack_dir()
    added = read_added_roots(settings.data_dir)
    for root in settings.workspace_roots:
        console.print(f"{root}  (setting workspace_roots)", markup=False, soft_wrap=True)
    for root in added:
        console.print(f"{root}  (added)", markup=False, soft_wrap=True)


@roots_app.command("add")
def add_root(
    path: str = typer.Argument(..., help="An existing directory (resolved on this host)."),
) -> None:
    """Let sessions have their workspace under PATH, from now on (no restart)."""
    from pathlib import Path

    from parkgate.settings.paths import read_added_roots, write_added_roots

    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise typer.BadParameter(f"{root} is not an existing directory", param_hint="PATH")
    settings = _stack_dir()
    added = read_added_roots(settings.data_dir)
    if root in settings.workspace_roots or root in added:
        console.print(f"{root} is already a workspace root", markup=False, soft_wrap=True)
        return
    write_added_roots(settings.data_dir, [*added, root])
    console.print(f"added workspace root {root}: new sessions may have their workspace "
                  "under it now", markup=False, soft_wrap=True)


@roots_app.command("remove")
def remove_root(path: str = typer.Argument(..., help="A root added with `roots add`.")) -> None:
    """Take back a root added with `roots add`: new sessions under it are refused;
    sessions already registered keep their workspace."""
    from pathlib import Path

    from parkgate.settings.paths import read_added_roots, write_added_roots

    root = Path(path).expanduser().resolve()
    settings = _stack_dir()
    added = read_added_roots(settings.data_dir)
    if root not in added:
        where = (" (it comes from the workspace_roots setting)"
                 if root in settings.workspace_roots else "")
        raise CliError(f"{root} is not an added workspace root{where}", code=2)
    write_added_roots(settings.data_dir, [r for r in added if r != root])
    console.print(f"removed workspace root {root}", markup=False, soft_wrap=True)
