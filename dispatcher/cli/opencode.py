"""`parkgate opencode install`: put opencode's tool calls behind parkgate.

Writes parkgate's plugin (`.opencode/plugin/parkgate.js`, or the user's) and
merges opencode's permissions so an allowed call runs (parkgate.dialects.
opencode_setup); everything else in the config stays. `--print` shows both
files instead of writing them.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from parkgate.cli.common import CliError, console, load_settings

NAME = "opencode"
app = typer.Typer(help="Put opencode's tool calls behind parkgate.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """opencode integration."""


@app.command("install")
def install(
    project: Path | None = typer.Option(None, "--project", help="Project directory (default: .)."),
    user: bool = typer.Option(False, "--user",
                              help="Install for every project (~/.config/opencode)."),
    print_only: bool = typer.Option(False, "--print", help="Print both files, write nothing."),
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (default: "
                                   "PARKGATE_API_URL, the running serve, public_base_url)."),
) -> None:
    """Write parkgate's opencode plugin and let opencode run what parkgate allows."""
    from parkgate.cli.agent_install import resolve_url, scope, write_text
    from parkgate.dialects import opencode_setup
    from parkgate.dialects.hook_files import HookFileError

    project, user = scope(project, user)
    if project is not None and not project.is_dir():
        raise CliError(f"--project {project} is not a directory", 2)
    settings = load_settings()
    base, source = resolve_url(url, settings)
    where = opencode_setup.targets(project, user)
    try:
        merged = opencode_setup.merge_config(opencode_setup.read_config(where.config))
    except HookFileError as exc:
        raise CliError(str(exc)) from None
    config = json.dumps(merged, indent=2) + "\n"
    plugin = opencode_setup.plugin_text(base, settings.opencode_wait_seconds)
    if print_only:
        typer.echo(f"==> {where.plugin} <==\n{plugin}\n==> {where.config} <==\n{config}", nl=False)
        return
    write_text(where.plugin, plugin)
    write_text(where.config, config)
    console.print(f"parkgate's plugin written to {where.plugin} (calls go to {base}, from "
                  f"{source}); "
                  f"permissions set in {where.config}. Run opencode with PARKGATE_API_KEY "
                  "(an agent key) in its environment.", soft_wrap=True)
