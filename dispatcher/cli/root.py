"""`parkgate` command line: one typer app; each command group lives in its own module
(`parkgate.cli.main` imports this module, except for a hook: parkgate.cli).

Errors are uniform: a bad argument, option or configuration prints ONE line on
stderr and exits 2; a runtime failure prints one line and exits 1. Set
PARKGATE_DEBUG=1 to see the traceback of an unexpected error.

Modules register themselves in one of two ways (see `_register`):
- a module-level `app: typer.Typer` becomes the sub-command named after the module
  (or its `NAME` attribute), e.g. `parkgate db upgrade`;
- a module-level `register(app)` adds top-level commands, e.g. `parkgate serve`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from parkgate.cli.common import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    CliError,
    describe_validation_error,
    one_line,
    use_config_file,
)
from parkgate.cli.process_exit import exit_code_of, finish

__all__ = ["CliError", "app", "main"]


def _click_class(name: str) -> type[Exception]:
    """click's exception class `name`, reached through typer's public `BadParameter`.

    typer vendors click under a private module in some releases and depends on
    click in others; the public class's bases are the same classes in both.
    """
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name and issubclass(cls, Exception):
            return cls
    raise RuntimeError(f"typer.BadParameter has no base class {name}")


_UsageError = _click_class("UsageError")
_ClickException = _click_class("ClickException")


def _hide_flag_types(command: Any, help_names: list[str]) -> None:
    """Show no value type for flags: a flag takes no value, yet typer prints `<bool>`."""
    ctx = typer.Context(command, help_option_names=help_names)
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _hide_flag_types(sub, help_names)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"parkgate: error: {one_line(message)}\n")
    sys.stderr.flush()
    return code


class ParkgateGroup(TyperGroup):
    """Root group whose `main` turns every failure into one line + an exit code."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        code = self._main_checked(args, prog_name or "parkgate", complete_var, extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _main_checked(
        self,
        args: Sequence[str] | None,
        prog_name: str,
        complete_var: str | None,
        extra: dict[str, Any],
    ) -> int:
        _hide_flag_types(self, ["-h", "--help"])
        try:
            rv = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except _UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                # Building the error rendered the help already (rich prints it at
                # once and leaves the message empty; plain help is the message).
                text = exc.format_message()  # type: ignore[attr-defined]
                if text.strip():
                    sys.stdout.write(text + "\n")
                return EXIT_USAGE
            return _fail(exc.format_message(), EXIT_USAGE)  # type: ignore[attr-defined]
        except _ClickException as exc:
            code = getattr(exc, "exit_code", None) or EXIT_RUNTIME
            return _fail(exc.format_message(), code)  # type: ignore[attr-defined]
        except CliError as exc:
            return _fail(exc.message, exc.code)
        except ValidationError as exc:
            return _fail(f"invalid configuration: {describe_validation_error(exc)}", EXIT_USAGE)
        except (typer.Abort, KeyboardInterrupt):
            sys.stderr.write("aborted\n")
            return 130
        except typer.Exit as exc:
            return int(exc.exit_code or 0)
        except Exception as exc:
            if os.environ.get("PARKGATE_DEBUG"):
                raise
            return _fail(f"{type(exc).__name__}: {exc}", EXIT_RUNTIME)
        return rv if isinstance(rv, int) else 0


app = typer.Typer(
    name="parkgate",
    cls=ParkgateGroup,
    help="parkgate: a durable tool-call dispatcher for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML settings file (default: $PARKGATE_DATA_DIR/server.yaml when it exists).",
        show_default=False,
    ),
) -> None:
    """parkgate: classify tool calls, park them for a human, run them at most once, audit all."""
    use_config_file(config)


#: Command modules, in help order. Each defines `app` (a group) or `register(app)`.
_MODULES = (
    "serve",
    "worker_cmd",
    "api_cmd",
    "db",
    "keys",
    "workspaces",
    "calls",
    "remembered",
    "decide",
    "approvers",
    "audit",
    "tools",
    "config",
    "policy",
    "claude_code",
    "codex",
    "gemini",
    "opencode",
    "hook",
)


def _register(root: typer.Typer) -> None:
    for name in _MODULES:
        module = importlib.import_module(f"parkgate.cli.{name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(root)
            continue
        sub = getattr(module, "app", None)
        if isinstance(sub, typer.Typer):
            root.add_typer(sub, name=getattr(module, "NAME", name))
            continue
        raise RuntimeError(f"parkgate.cli.{name} defines neither `app` nor `register(app)`")


_register(app)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (`parkgate`): run the command, then end the
    process (`parkgate.cli.process_exit`: past a Temporal runtime, without the
    interpreter teardown that can abort it)."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="parkgate")
    except SystemExit as exc:
        finish(exit_code_of(exc))
    finish(0)
