"""`parkgate remembered list|revoke`: approvers' remembered decisions.

An allow with `remember` (API, approval page) stores a rule that lets the same
call run again in its session or workspace until it expires; operators list
and revoke them here, as the HTTP API does (`/v1/remembered`).
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from parkgate.cli.common import CliError, console, in_repository
from parkgate.cli.output import (
    Cell,
    Output,
    output_option,
    print_json,
    print_rows,
    shortened,
    wide_option,
)

if TYPE_CHECKING:
    from parkgate.store import Repository

app = typer.Typer(help="List and revoke remembered decisions.", no_args_is_help=True)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


@app.command("list")
def list_rules(
    project: str = typer.Option("default", "--project", "-p", help="The project's rules."),
    session: str | None = typer.Option(None, "--session", "-s", help="Only this session."),
    workspace: str | None = typer.Option(None, "--workspace", help="Only this workspace."),
    all_: bool = typer.Option(False, "--all", help="Include revoked and expired rules."),
    output: Output = output_option(),
    wide: bool = wide_option(),
) -> None:
    """Remembered decisions, oldest first (active ones unless --all)."""
    from parkgate.models import utcnow

    now = utcnow()
    rules = in_repository(lambda repo: repo.list_remembered(
        project=project, session_id=session, workspace_path=workspace,
        include_inactive=all_, now=now))
    if output is Output.json:
        print_json([rule.model_dump(mode="json") for rule in rules])
        return
    rows: list[list[Cell]] = []
    ids = shortened([rule.rule_id for rule in rules])
    wheres = shortened([rule.session_id if rule.scope == "session" else None for rule in rules])
    for i, rule in enumerate(rules):
        allows = (f"prefix: {rule.command_prefix}" if rule.match == "prefix"
                  else f"input {rule.input_hash[:12]}")
        state = ("[red]revoked[/red]" if rule.revoked_at is not None
                 else "[green]active[/green]" if rule.active(now) else "[magenta]expired[/magenta]")
        where: Cell = (wheres[i] if rule.scope == "session"
                       else (escape(rule.workspace_path or "-"),
                             escape(_short_path(rule.workspace_path or "-"))))
        expires = rule.expires_at
        rows.append([ids[i], rule.scope, where, escape(rule.tool_name), escape(allows),
                     escape(rule.created_by or "-"),
                     (_when(expires), expires.strftime("%m-%d %H:%M") if expires else "-"),
                     state])
    print_rows(f"Remembered decisions ({len(rules)}), times in UTC",
               ["id", "scope", "session / workspace", "tool", "allows", "by", "expires",
                "state"], rows, drop=["by", "scope"], wide=wide)


def _short_path(path: str) -> str:
    """A workspace path in a narrow table: `~` for the home directory, and only
    its last two parts when it is still long."""
    from pathlib import Path

    home = str(Path.home())
    if path == home or path.startswith(home + "/"):
        path = "~" + path[len(home):]
    parts = path.split("/")
    return path if len(path) <= 24 or len(parts) <= 3 else "…/" + "/".join(parts[-2:])


@app.command("revoke")
def revoke(rule_id: str = typer.Argument(..., help="The rule's id (from `list`).")) -> None:
    """Revoke a remembered decision: later calls it covered park again."""
    from parkgate.models import utcnow

    async def work(repo: Repository) -> Any:
        if await repo.get_remembered(rule_id) is None:
            raise CliError(f"no remembered rule {rule_id!r}")
        return await repo.revoke_remembered(rule_id, by=f"cli:{getpass.getuser()}",
                                            now=utcnow())

    rule = in_repository(work)
    console.print(f"revoked {rule.rule_id} (by {rule.revoked_by} at {_when(rule.revoked_at)})")
