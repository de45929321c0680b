"""`parkgate serve`: the embedded one-machine stack (Temporal dev server, worker, API).

State lives under PARKGATE_DATA_DIR (default ~/.parkgate): the SQLite history,
the dev server's database and the link secret. Ctrl-C stops everything; the
next start finds parked calls still parked.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import typer
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from parkgate.cli.common import CliError, console, err_console, load_settings, run
from parkgate.cli.policy import require_valid_policies


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def warn_root(tool_user: str | None) -> None:
    """Say loudly, before anything starts, that tools would run as root."""
    from parkgate.sandbox.tool_user import root_warning

    warning = root_warning(tool_user)
    if warning is not None:
        # One sentence a line, wrapped between words inside the box: stderr's
        # console soft-wraps (one-line errors), which cut the box at 80 columns.
        sentences = re.split(r"(?<=[.)])\s+(?=[A-Z])", f"WARNING: {warning}")
        err_console.print(Panel(Text("\n".join(sentences)), title="tools run as root",
                                border_style="bold red"), style="bold red", soft_wrap=False)


def _stack_port(default: int, flag: str, what: str) -> Any:
    """An option for a port of the embedded dev server (one wording for all)."""
    return typer.Option(default, flag, min=0, max=65535,
                        help=f"{what} (another free port when taken; 0 = any).")


def serve(
    port: int | None = typer.Option(
        None,
        "--port",
        "-p",
        min=1,
        max=65535,
        help="API port (default: the api_port setting, 8420).",
    ),
    temporal_port: int = _stack_port(7233, "--temporal-port", "Dev server gRPC port"),
    ui_port: int = _stack_port(8233, "--ui-port", "Temporal UI port"),
    log_level: str = typer.Option("warning", "--log-level", help="API (uvicorn) log level."),
    key_name: str | None = typer.Option(
        None, "--key-name", help="Name of the API key created at start (default: serve-<4 hex>)."
    ),
    new_keys: bool = typer.Option(
        False, "--new-keys", help="Mint a new agent and approver key and revoke the pair the "
        "last start printed (by default each start of a data directory reuses it)."
    ),
) -> None:
    """Start Temporal, a worker and the API on 127.0.0.1; print the URLs and the API keys
    (the same pair at every start of a data directory, unless --new-keys)."""
    from parkgate.api.assemble import api_app
    from parkgate.runtime.embedded import Banner, EmbeddedStack, StartupError

    if log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    settings = load_settings()
    require_valid_policies(settings)
    stack = EmbeddedStack(
        settings,
        api_app,
        port=port,
        temporal_port=temporal_port,
        ui_port=ui_port,
        log_level=log_level,
        key_name=key_name,
        new_keys=new_keys,
    )
    err_console.print(f"parkgate: starting (data in {settings.data_dir}) ...")
    warn_root(settings.tool_user)

    def ready(banner: Banner) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("API", banner.api_url)
        table.add_row("Audit", banner.audit_url)
        table.add_row("Temporal UI", banner.temporal_ui_url)
        table.add_row("Temporal", banner.temporal_address)
        table.add_row("API key", f"{banner.api_key} (agent)")
        table.add_row("Key name", banner.api_key_name)
        table.add_row("Approver key", f"{banner.approver_key} (approver, auditor: audit pages)")
        table.add_row("History", banner.database)
        table.add_row("Data dir", str(banner.data_dir))
        console.print(Panel(table, title="parkgate is running", subtitle="Ctrl-C to stop"))
        # Plain lines too, for scripts and logs that do not keep the panel layout.
        console.print(f"PARKGATE_API_URL={banner.api_url}", soft_wrap=True)
        console.print(f"PARKGATE_API_KEY={banner.api_key}", soft_wrap=True)
        console.print(f"PARKGATE_APPROVER_KEY={banner.approver_key}", soft_wrap=True)
        console.file.flush()

    async def main() -> None:
        from parkgate.runtime.embedded import stop_on_signals

        stop = asyncio.Event()
        with stop_on_signals(stop):
            await stack.run(ready, stop)

    try:
        run(main())
    except StartupError as exc:
        raise CliError(str(exc)) from exc
    err_console.print("parkgate: stopped")
