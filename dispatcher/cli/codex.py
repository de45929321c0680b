"""`parkgate codex install`: put Codex's tool calls behind parkgate, trusted.

Merges parkgate's PreToolUse and PostToolUse command hooks into Codex's
hooks.json (`$CODEX_HOME/hooks.json` with `--user`, the default; a project's
`.codex/hooks.json` with `--project DIR`), keeping every other hook, with a
`timeout` (integer seconds) 30 s above `codex_wait_seconds`. Then it trusts
them: Codex skips untrusted hooks silently and runs the tool, so the install
asks `codex app-server` for each hook's hash and records it in
`$CODEX_HOME/config.toml` (parkgate.cli.codex_trust). `--check` says whether
the hooks are in place and trusted (exit 1 when not).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from parkgate.cli.common import CliError, console

if TYPE_CHECKING:
    from parkgate.cli.codex_trust import ListedHook

NAME = "codex"
app = typer.Typer(help="Put Codex's tool calls behind parkgate.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Codex integration."""


def hooks_path(project: Path | None) -> Path:
    """Where the hooks go: the project's .codex/hooks.json, or CODEX_HOME's."""
    from parkgate.cli.codex_trust import codex_home

    if project is not None:
        return project.absolute() / ".codex" / "hooks.json"
    return codex_home() / "hooks.json"


@app.command("install")
def install(
    project: Path | None = typer.Option(None, "--project", help="A project directory."),
    user: bool = typer.Option(False, "--user", help="$CODEX_HOME/hooks.json (the default)."),
    print_only: bool = typer.Option(False, "--print", help="Print the merged JSON, write nothing."),
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (default: "
                                   "PARKGATE_API_URL, the running serve, public_base_url)."),
    check: bool = typer.Option(False, "--check",
                               help="Only say whether parkgate's hooks are in place and trusted."),
    codex: str | None = typer.Option(None, "--codex", help="The codex executable (default: PATH)."),
) -> None:
    """Merge parkgate's hooks into Codex's hooks.json and trust them."""
    from parkgate.cli.agent_install import merged_hooks, scope, write_text
    from parkgate.dialects.hook_files import codex_hooks

    project, user = scope(project, user)
    path = hooks_path(project)
    if check:
        _check(path, project, codex)
        return
    text, base, source = merged_hooks(path, NAME, url, lambda s: s.codex_wait_seconds,
                                      codex_hooks)
    if print_only:
        typer.echo(text, nl=False)
        return
    write_text(path, text)
    console.print(f"parkgate hooks installed in {path} (posting to {base}, from {source}).")
    _trust(path, project, codex)
    console.print("Export PARKGATE_API_KEY (an agent key) where Codex runs.")


def _ours(path: Path, project: Path | None, codex: str | None) -> list[ListedHook]:
    from parkgate.cli.codex_trust import TrustError, find_codex, list_hooks
    from parkgate.dialects.hook_files import MARK

    try:
        listed = list_hooks(find_codex(codex), project or Path.home())
    except TrustError as exc:
        raise CliError(f"Codex's hook trust could not be read: {exc}") from None
    return [h for h in listed if Path(h.source_path) == path
            and MARK.format(agent=NAME) in h.command]


def _trust(path: Path, project: Path | None, codex: str | None) -> None:
    """Record Codex's hash of each of parkgate's hooks in config.toml; verify."""
    from parkgate.cli.agent_install import write_text
    from parkgate.cli.codex_trust import codex_home
    from parkgate.dialects.hook_files import HookFileError, set_trusted_hash

    ours = _ours(path, project, codex)
    if not ours:
        raise CliError(f"Codex does not load {path} (for a project, trust the project in "
                       "Codex first); its hooks are not trusted and would not run")
    config = codex_home() / "config.toml"
    text = config.read_text(encoding="utf-8") if config.is_file() else ""
    try:
        for hook in ours:
            if not hook.trusted:
                text = set_trusted_hash(text, hook.key, hook.current_hash)
    except HookFileError as exc:
        raise CliError(f"{config}: {exc}") from None
    write_text(config, text)
    untrusted = [h.key for h in _ours(path, project, codex) if not h.trusted]
    if untrusted:
        raise CliError(f"Codex still does not trust {', '.join(untrusted)}")
    console.print(f"Codex trusts parkgate's {len(ours)} hooks ({config}).")


def _check(path: Path, project: Path | None, codex: str | None) -> None:
    ours = _ours(path, project, codex)
    events = {h.event for h in ours}
    missing = {"preToolUse", "postToolUse"} - events
    if missing:
        raise CliError(f"parkgate's Codex hooks are not installed in {path} (missing: "
                       f"{', '.join(sorted(missing))}): run `parkgate codex install`")
    untrusted = [h.key for h in ours if not h.trusted]
    if untrusted:
        raise CliError("parkgate's Codex hooks are NOT trusted, so Codex skips them and runs "
                       f"every tool: {', '.join(untrusted)}; run `parkgate codex install`")
    console.print(f"parkgate's Codex hooks in {path} are installed and trusted.")
