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
from parkgate.cli.common import CliError, console, load_settings, open_repository, run
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
    settings = load_settings()

    async def fetch() -> Any:
        async with open_repository(settings) as repo:
            return await repo.workspace_holdings(project=project)

    holdings = run(fetch())
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
    settings = load_settings()

    async def work() -> bool:
        async with open_repository(settings) as repo:
            return await repo.grant_workspace(where, who, by=f"cli:{getpass.getuser()}")

    created = run(work())
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
    settings = load_settings()

    async def work() -> bool:
        async with open_repository(settings) as repo:
            return await repo.release_workspace(where, who,
                                                kinds=("owner",) if owner else ("grant",))

    if not run(work()):
        what = f"does not own {where}" if owner else f"holds no grant of {where}"
        raise CliError(f"project {who} {what}", code=2)
    console.print(f"revoked project {who}'s {'hold' if owner else 'grant'} of {where}")
