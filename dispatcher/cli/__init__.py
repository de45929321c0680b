"""`parkgate` command line (the typer app is parkgate.cli.root).

`main` is the console script. A hook is run as a process per tool call
(`parkgate hook claude-code`, `hook codex`, `hook gemini` ...), so it skips
the CLI's imports (typer, every command module, the settings) when its options
are plain: parkgate.cli.hook_run. `parkgate api` with plain options skips
typer and the CLI's root too (parkgate.cli.api_cmd.run_argv): a long-running
API would hold them for nothing.
`app` and `CliError` are loaded on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from parkgate.cli.common import CliError
    from parkgate.cli.root import app

__all__ = ["CliError", "app", "main"]

#: The first argument of the command hook (`hook <agent>`).
_HOOK = "hook"
#: The first argument of `parkgate api`.
_API = "api"


def __getattr__(name: str) -> Any:
    if name == "app":
        from parkgate.cli.root import app

        return app
    if name == "CliError":
        from parkgate.cli.common import CliError

        return CliError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (`parkgate`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] == _HOOK:
        from parkgate.cli.hook_run import run_argv, wire_for

        wire = wire_for(args[1])
        code = run_argv(args[2:], wire) if wire is not None else None
        if code is not None:  # run_argv flushed what it printed (a closed stdout too)
            end_hook_process(code)
    if args[:1] == [_API]:
        from parkgate.cli.api_cmd import run_argv as run_api_argv

        code = run_api_argv(args[1:])
        if code is not None:
            from parkgate.cli.process_exit import finish

            finish(code)
    from parkgate.cli.root import main as run_cli

    run_cli(argv)


def end_hook_process(code: int) -> NoReturn:
    """End a hook process with `code` without CPython's teardown.

    Its answer is printed and flushed by then, and nothing else is left to
    close; its park watch is a daemon thread that may be waking from a wait or
    a socket read while the interpreter finalizes, and such a thread once
    killed the process with SIGSEGV after the deny was printed (exit -11,
    which Claude Code does not read as a block).
    """
    from parkgate.cli.process_exit import exit_now

    exit_now(code)
