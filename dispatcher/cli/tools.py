"""`parkgate tools list`: the tools an agent can call, with their side-effect class."""

from __future__ import annotations

import typer
from rich.table import Table

from parkgate.cli.common import console, load_settings
from parkgate.cli.output import Output, output_option, print_json

app = typer.Typer(help="Inspect the registered tools.", no_args_is_help=True)


@app.command("list")
def list_tools(
    as_json: bool = typer.Option(False, "--json", help="Same as --output json."),
    output: Output = output_option(),
) -> None:
    """List the built-in tools: name, side-effect class, timeout and description."""
    from parkgate.cli.config import load_policy, load_registry
    from parkgate.models import Session

    settings = load_settings()
    policy = load_policy(settings)
    registry = load_registry()
    definitions = registry.definitions()
    if as_json or output is Output.json:
        print_json([d.model_dump(mode="json") for d in definitions])
        return
    workspace = str(settings.workspace_roots[0]) if settings.workspace_roots else "."
    session = Session(session_id="tools-list", turn_id="t", workspace_path=workspace)
    table = Table(title="Tools", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("side effects")
    table.add_column("timeout")
    table.add_column("policy")
    table.add_column("description", overflow="fold")
    for definition in definitions:
        timeout = definition.timeout_seconds
        table.add_row(
            definition.name,
            definition.side_effects.value.upper(),
            f"{timeout:g}s" if timeout else "default",
            policy.decide(definition, {}, session).mode,
            definition.description.strip().splitlines()[0] if definition.description else "",
        )
    console.print(table)
