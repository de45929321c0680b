"""`parkgate gemini install`: put Gemini CLI's tool calls behind parkgate.

Merges parkgate's BeforeTool and AfterTool command hooks into Gemini CLI's
settings.json (`~/.gemini/settings.json` with `--user`, the default: a user's
hooks need no trust step; a project's `.gemini/settings.json` with
`--project DIR`, which Gemini runs only in a trusted folder), keeping every
other setting and hook, with a `timeout` in milliseconds 30 s above
`gemini_wait_seconds` (past it Gemini runs the tool; the hook answers first).
"""

from __future__ import annotations

from pathlib import Path

import typer

from parkgate.cli.common import CliError, console

NAME = "gemini"
app = typer.Typer(help="Put Gemini CLI's tool calls behind parkgate.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Gemini CLI integration."""


def settings_path(project: Path | None) -> Path:
    if project is not None:
        return project.absolute() / ".gemini" / "settings.json"
    return Path.home() / ".gemini" / "settings.json"


@app.command("install")
def install(
    project: Path | None = typer.Option(None, "--project", help="A project directory."),
    user: bool = typer.Option(False, "--user", help="~/.gemini/settings.json (the default)."),
    print_only: bool = typer.Option(False, "--print", help="Print the merged JSON, write nothing."),
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (default: "
                                   "PARKGATE_API_URL, the running serve, public_base_url)."),
    check: bool = typer.Option(False, "--check",
                               help="Only say whether parkgate's hooks are in place."),
) -> None:
    """Merge parkgate's hooks into Gemini CLI's settings.json."""
    from parkgate.cli.agent_install import merged_hooks, read_json, scope, write_text
    from parkgate.dialects.hook_files import GEMINI_EVENTS, gemini_settings, is_parkgate_hook

    project, user = scope(project, user)
    path = settings_path(project)
    if check:
        existing = read_json(path)
        hooks = existing.get("hooks") if isinstance(existing.get("hooks"), dict) else {}
        missing = [e for e in GEMINI_EVENTS if not any(
            is_parkgate_hook(h, NAME) for g in (hooks or {}).get(e) or []
            if isinstance(g, dict) for h in g.get("hooks") or [])]
        if missing:
            raise CliError(f"parkgate's Gemini CLI hooks are not in {path} (missing: "
                           f"{', '.join(missing)}): run `parkgate gemini install`")
        console.print(f"parkgate's Gemini CLI hooks are in {path}.")
        return
    text, base, source = merged_hooks(path, NAME, url, lambda s: s.gemini_wait_seconds,
                                      gemini_settings)
    if print_only:
        typer.echo(text, nl=False)
        return
    write_text(path, text)
    console.print(f"parkgate hooks installed in {path} (posting to {base}, from {source}); "
                  "export PARKGATE_API_KEY (an agent key) where Gemini CLI runs.")
