"""`parkgate approvers add|list|remove|inbox-link`: named approvers without editing YAML.

Named approvers live in the settings file (`approvers:` in server.yaml, or the
`--config` file): `add` and `remove` rewrite that file (the previous version
is kept beside it as `.bak`), check that the result still loads, and say what
changed. A running stack reads its settings at start: restart it to use them.

`inbox-link NAME` prints a named approver's personal inbox link: every parked
call naming that approver, decided in place (docs/APPROVERS.md, "Inbox"). It
is signed with the link secret and valid for `inbox_link_days`; rotating the
secret (`link_secret`) revokes all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.markup import escape

from parkgate.cli.common import (
    EXIT_USAGE,
    CliError,
    ConfigError,
    console,
    err_console,
    load_settings,
    run,
)
from parkgate.cli.output import (
    Output,
    output_option,
    print_json,
    print_rows,
    shortened,
    wide_option,
)

app = typer.Typer(help="Named approvers: add, list, remove, inbox links.",
                  no_args_is_help=True)

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
_RESTART = "restart parkgate serve (or the API and workers) to use it"


def _settings_path() -> Path:
    """The file `add`/`remove` edit: the one in use, else <data_dir>/server.yaml."""
    from parkgate.settings.paths import config_file, default_data_dir

    return config_file() or default_data_dir() / "server.yaml"


def _read(path: Path) -> tuple[str | None, dict[str, Any]]:
    """(the file's text or None, its YAML mapping)."""
    if not path.exists():
        return None, {}
    text = path.read_text()
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML in {path}: {' '.join(str(exc).split())}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the settings file must be a mapping")
    return text, doc


def _write_checked(path: Path, before: str | None, doc: dict[str, Any]) -> None:
    """Write `doc`, then load the settings and policy from it; on any problem put
    the previous file back and fail with what was wrong."""
    from parkgate.cli.config import load_policy
    from parkgate.settings import get_settings

    path.parent.mkdir(parents=True, exist_ok=True)
    if before is not None:
        path.with_name(path.name + ".bak").write_text(before)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    get_settings.cache_clear()
    try:
        load_policy(load_settings())
    except CliError as exc:
        if before is None:
            path.unlink()
        else:
            path.write_text(before)
        get_settings.cache_clear()
        raise ConfigError(f"{path} left unchanged: {exc.message}") from exc


def _name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise typer.BadParameter("1-64 letters, digits, _ . or -, starting with a letter or digit",
                                 param_hint="NAME")
    return name


@app.command("add")
def add(
    name: str = typer.Argument(..., help="The approver's name, as rules name them."),
    email: str | None = typer.Option(None, "--email", help="Where parked calls are mailed."),
    key: str | None = typer.Option(
        None, "--key", help="Name of an API key that decides as this approver."),
    slack_user_id: str | None = typer.Option(
        None, "--slack-user-id", help="Slack member id (U...) whose clicks decide as them."),
    create_key: bool = typer.Option(
        False, "--create-key",
        help="Also create an approver API key `approver-NAME` for them (printed once)."),
) -> None:
    """Add a named approver to the settings file."""
    _name(name)
    if key is not None and create_key:
        raise typer.BadParameter("give --key or --create-key, not both", param_hint="--key")
    path = _settings_path()
    before, doc = _read(path)
    approvers = doc.setdefault("approvers", {}) or {}
    if not isinstance(approvers, dict):
        raise ConfigError(f"{path}: `approvers` must be a mapping")
    if name in approvers:
        raise CliError(f"approver {name!r} already exists in {path}", EXIT_USAGE)
    plaintext = None
    if create_key:
        key, plaintext = f"approver-{name}", run(_create_key(f"approver-{name}"))
    entry = {k: v for k, v in (("email", email), ("key", key),
                                ("slack_user_id", slack_user_id)) if v is not None}
    approvers[name] = entry
    doc["approvers"] = approvers
    _write_checked(path, before, doc)
    how = ", ".join(f"{k} {v}" for k, v in entry.items()) or "no channel yet"
    console.print(f"added approver {name} ({how}) to {path}; {_RESTART}", soft_wrap=True)
    if plaintext is not None:
        err_console.print(f"API key {key} (roles approver, auditor), shown only once:")
        console.print(plaintext)


async def _create_key(key_name: str) -> str:
    from parkgate.cli.common import open_repository
    from parkgate.store.errors import ApiKeyNameTakenError

    async with open_repository(load_settings()) as repo:
        try:
            plaintext, _ = await repo.create_api_key(key_name, roles=["approver", "auditor"])
        except ApiKeyNameTakenError as exc:
            raise CliError(f"an active API key is already named {key_name!r}; pass "
                           "--key with it instead", EXIT_USAGE) from exc
    return plaintext


@app.command("remove")
def remove(name: str = typer.Argument(..., help="The approver to remove.")) -> None:
    """Remove a named approver (and their group memberships) from the settings file."""
    path = _settings_path()
    before, doc = _read(path)
    approvers = doc.get("approvers") or {}
    if not isinstance(approvers, dict) or name not in approvers:
        known = ", ".join(sorted(approvers)) if isinstance(approvers, dict) else ""
        raise CliError(f"no approver {name!r} in {path} (approvers: {known or 'none'})",
                       EXIT_USAGE)
    del approvers[name]
    groups = doc.get("approver_groups") or {}
    left = []
    if isinstance(groups, dict):
        for group, members in groups.items():
            if isinstance(members, list) and name in members:
                members.remove(name)
                left.append(group)
    _write_checked(path, before, doc)
    also = f" and from group{'s' if len(left) > 1 else ''} {', '.join(left)}" if left else ""
    console.print(f"removed approver {name}{also} in {path}; {_RESTART}", soft_wrap=True)


@app.command("list")
def list_approvers(output: Output = output_option(), wide: bool = wide_option()) -> None:
    """Named approvers: their channels, API key and groups."""
    settings = load_settings()
    groups = {name: sorted(g for g, members in settings.approver_groups.items()
                           if name in members) for name in settings.approvers}
    if output is Output.json:
        print_json({name: {**entry.model_dump(), "groups": groups[name]}
                    for name, entry in settings.approvers.items()})
        return
    if not settings.approvers:
        err_console.print("no named approvers; add one with `parkgate approvers add NAME "
                          "--email ADDRESS`")
        return
    named = sorted(settings.approvers.items())
    keys = shortened([a.key for _, a in named])
    print_rows(
        f"Approvers ({len(settings.approvers)})",
        ["name", "email", "API key", "Slack user", "groups"],
        [[escape(name), escape(a.email or "-"), keys[i], escape(a.slack_user_id or "-"),
          escape(", ".join(groups[name]) or "-")] for i, (name, a) in enumerate(named)],
        drop=["Slack user"], wide=wide,
    )


@app.command("inbox-link")
def inbox_link(
    name: str = typer.Argument(..., help="A named approver from `approvers:`."),
) -> None:
    """Print NAME's personal inbox link (send it to them privately)."""
    from parkgate.approvals.links import inbox_url

    settings = load_settings()
    if name not in settings.approvers:
        known = ", ".join(sorted(settings.approvers)) or "none configured"
        raise CliError(f"unknown approver {name!r} (approvers: {known})")
    console.print(inbox_url(settings.public_base_url, settings.signing_secret(), name),
                  soft_wrap=True)
    console.print(f"valid for {settings.inbox_link_days} days", style="dim")
