"""`parkgate keys create|list|revoke`: API keys for the HTTP API and audit pages.

Keys are stored hashed; `create` prints the key once and it cannot be shown
again. A revoked key is refused (401) from the next request on.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from parkgate.approvals.access import DEFAULT_PROJECT, PROJECT_PATTERN, RoleError, normalize_roles
from parkgate.cli.common import CliError, console, err_console, in_repository
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
    from parkgate.store.repository import Repository
    from parkgate.store.results import ApiKeyRecord

app = typer.Typer(help="API keys for the HTTP API and the audit pages.", no_args_is_help=True)

def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


def _short_when(value: datetime | None) -> str:
    """A time in a narrow table (the title says UTC)."""
    return value.strftime("%m-%d %H:%M") if value else "—"


@app.command("create")
def create(
    name: str = typer.Option(
        ..., "--name", "-n", help="A label for the key (unique among active keys)."
    ),
    project: str = typer.Option(
        DEFAULT_PROJECT, "--project", "-p",
        help="The project the key belongs to; it sees only that project's sessions.",
    ),
    roles: list[str] = typer.Option(
        ["agent"], "--role", "-r",
        help="A role (repeat for several): agent, approver, auditor, admin.",
    ),
) -> None:
    """Create a key and print it (once: it is stored hashed)."""
    from parkgate.store.errors import ApiKeyNameTakenError

    name = name.strip()
    if not name or len(name) > 200:
        raise typer.BadParameter("must be 1-200 characters", param_hint="--name")
    project = project.strip()
    if not re.fullmatch(PROJECT_PATTERN, project):
        raise typer.BadParameter(
            "must be 1-100 letters, digits, _ . or -", param_hint="--project"
        )
    try:
        role_list = normalize_roles(roles)
    except RoleError as exc:
        raise typer.BadParameter(str(exc), param_hint="--role") from exc

    async def action(repo: Repository) -> str:
        try:
            plaintext, _record = await repo.create_api_key(
                name, project=project, roles=role_list
            )
        except ApiKeyNameTakenError as exc:
            raise CliError(str(exc), code=2) from exc
        return plaintext

    key = in_repository(action)
    err_console.print(
        f"created API key [bold]{name}[/] (project {project}, roles {', '.join(role_list)}); "
        "it is shown only once:"
    )
    console.print(key)


@app.command("list")
def list_keys(
    all_keys: bool = typer.Option(True, "--all/--active", help="Include revoked keys."),
    output: Output = output_option(),
    wide: bool = wide_option(),
) -> None:
    """List keys (name, project, roles, prefix, created, last used, state); never the keys."""

    async def action(repo: Repository) -> list[ApiKeyRecord]:
        return await repo.list_api_keys(include_revoked=all_keys)

    records = in_repository(action)
    if output is Output.json:
        print_json([{"name": r.name, "id": r.id, "project": r.project, "roles": r.roles,
                     "prefix": r.prefix, "created_at": r.created_at,
                     "last_used_at": r.last_used_at, "revoked_at": r.revoked_at,
                     "migrated": r.migrated} for r in records])
        return
    if not records:
        err_console.print("no API keys; create one with `parkgate keys create --name NAME`")
        return
    migrated = False
    rows: list[list[Cell]] = []
    ids = shortened([rec.id for rec in records])
    for rec, key_id in zip(records, ids, strict=True):
        state: Cell = ("[green]active[/]" if rec.revoked_at is None
                       else (f"revoked {_when(rec.revoked_at)}", "revoked"))
        roles = ",".join(rec.roles)
        if rec.migrated:
            roles += " (migrated*)"
            migrated = True
        rows.append([escape(rec.name), key_id, escape(rec.project), roles, rec.prefix + "…",
                     (_when(rec.created_at), _short_when(rec.created_at)),
                     (_when(rec.last_used_at), _short_when(rec.last_used_at)), state])
    print_rows("API keys, times in UTC",
               ["name", "id", "project", "roles", "prefix", "created", "last used", "state"],
               rows, drop=["prefix", "id"], wide=wide)
    if migrated:
        err_console.print(
            "* created before roles existed: given every role in project default. "
            "Replace with a key that holds only the roles it needs "
            "(`parkgate keys create --name NAME --role agent`), then revoke the old one."
        )


@app.command("revoke")
def revoke(name: str = typer.Argument(..., help="Name or id of the key to revoke.")) -> None:
    """Revoke an active key; requests using it get 401 from now on."""
    from parkgate.store.errors import ApiKeyNotFoundError

    async def action(repo: Repository) -> str:
        try:
            record = await repo.revoke_api_key(name)
        except ApiKeyNotFoundError as exc:
            raise CliError(str(exc), code=2) from exc
        return record.name

    revoked = in_repository(action)
    console.print(f"revoked API key {revoked}")
