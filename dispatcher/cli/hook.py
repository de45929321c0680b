"""`parkgate hook claude-code|codex|gemini|...`: the command-hook form of
/v1/hooks/<agent> (the work is parkgate.cli.hook_run's; `parkgate.cli.main`
runs it without the rest of the CLI when the options are plain, this command
otherwise). One subcommand per registered agent dialect (parkgate.dialects)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Answer an agent's hook events (reads stdin).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Hooks."""


@app.command("claude-code")
def claude_code_hook(
    url: str | None = typer.Option(None, "--url", help="parkgate's URL (public_base_url)."),
    fail_open: bool = typer.Option(False, "--fail-open",
                                   help="Let the call through when no decision comes back."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.1,
        help="Seconds to wait for parkgate (default: claude_code_wait_seconds + 25, "
             "inside the installed hook's own timeout)."),
) -> None:
    """Post one Claude Code hook event (stdin) to parkgate; print its answer.
    Anything but a decision blocks a PreToolUse: exit 2, the reason on stderr."""
    from parkgate.cli.hook_run import run

    raise typer.Exit(run(url, fail_open=fail_open, timeout=timeout))


def _agent_hook(name: str, label: str) -> None:
    """Register `parkgate hook <name>` for an agent dialect."""

    def command(
        url: str | None = typer.Option(None, "--url", help="parkgate's URL."),
        fail_open: bool = typer.Option(False, "--fail-open",
                                       help="Let the call through when no decision comes back."),
        timeout: float | None = typer.Option(
            None, "--timeout", min=0.1,
            help=f"Seconds to wait for parkgate (default: {name}_wait_seconds + 25)."),
    ) -> None:
        from parkgate.cli.hook_run import run, wire_for

        wire = wire_for(name)
        assert wire is not None
        raise typer.Exit(run(url, fail_open=fail_open, timeout=timeout, wire=wire))

    command.__doc__ = (f"Post one {label} hook event (stdin) to parkgate; print its answer. "
                       "Anything but a decision blocks the call: exit 2, the reason on stderr.")
    app.command(name)(command)


def _register() -> None:
    from parkgate.dialects import get, names

    for name in names():
        dialect = get(name)
        if dialect is not None:
            _agent_hook(name, dialect.label)


_register()
