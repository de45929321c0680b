"""`parkgate claude-code install`: put parkgate's hooks into Claude Code's settings.

Merges (never clobbers): other hooks and settings stay, an earlier parkgate
hook is replaced. `--print` shows the JSON instead of writing it.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from parkgate.cli.common import CliError, console, load_settings

NAME = "claude-code"
app = typer.Typer(help="Put Claude Code's tool calls behind parkgate.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Claude Code integration."""


def settings_path(project: Path | None, user: bool) -> Path:
    """Where the hooks go: the project's .claude/settings.json, or the user's."""
    if user:
        return Path.home() / ".claude" / "settings.json"
    return (project or Path.cwd()) / ".claude" / "settings.json"


@app.command("install")
def install(
    project: Path | None = typer.Option(None, "--project", help="Project directory (default: .)."),
    user: bool = typer.Option(False, "--user", help="Install into ~/.claude/settings.json."),
    print_only: bool = typer.Option(False, "--print", help="Print the merged JSON, write nothing."),
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (default: "
                                   "PARKGATE_API_URL, the running serve, public_base_url)."),
    command: bool = typer.Option(False, "--command",
                                 help="A command hook (`parkgate hook claude-code`), not HTTP."),
    fail_open: bool = typer.Option(False, "--fail-open",
                                   help="Let calls through when parkgate is unreachable."),
) -> None:
    """Merge the PreToolUse / PostToolUse / PostToolUseFailure hooks into Claude Code's settings."""
    from parkgate.cli.agent_install import parkgate_executable, read_json, resolve_url
    from parkgate.dialects.claude_code import merge_settings

    if user and project is not None:
        raise CliError("--project and --user exclude each other", 2)
    settings = load_settings()
    path = settings_path(project, user)
    existing = read_json(path)
    base, source = resolve_url(url, settings)
    merged = merge_settings(existing, base, command=command,
                            wait_seconds=settings.claude_code_wait_seconds,
                            fail_closed=settings.claude_code_fail_closed and not fail_open,
                            executable=parkgate_executable() if command else "parkgate")
    text = json.dumps(merged, indent=2) + "\n"
    if print_only:
        typer.echo(text, nl=False)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    console.print(f"parkgate hooks installed in {path} (posting to {base}, from {source}); "
                  "export PARKGATE_API_KEY (an agent key).")
