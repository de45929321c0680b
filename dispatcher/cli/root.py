"""`parkgate` command line: one typer app; each command group lives in its own module
(`parkgate.cli.main` imports this module, except for a hook: parkgate.cli).

Errors are uniform: a bad argument, option or configuration prints ONE line on
stderr and exits 2; a runtime failure prints one line and exits 1. Set
PARKGATE_DEBUG=1 to see the traceback of an unexpected error.

Modules register themselves in one of two ways (see `_register`):
- a module-level `app: typer.Typer` becomes the sub-command named after the module
  (or its `NAME` attribute), e.g. `parkgate db upgrade`;
- a module-level `register(app)` adds top-level commands, e.g. `parkgate serve`.

A command's module is imported when the command is looked up (`COMMANDS` says
which module defines which), not with the CLI: `parkgate api` and `parkgate
worker` are long-running processes, and the other commands' imports (rich's
tables and progress bars, YAML, the policy and sandbox modules) would stay in
their memory for nothing (docs/PERFORMANCE.md, "At rest"). Help lists them all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from parkgate.cli.common import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    CliError,
    fail,
    failed,
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


HELP_NAMES = ["-h", "--help"]


def _hide_flag_types(command: Any, *, recurse: bool = True) -> None:
    """Show no value type for flags: a flag takes no value, yet typer prints `<bool>`."""
    ctx = typer.Context(command, help_option_names=HELP_NAMES)
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    if recurse:
        for sub in getattr(command, "commands", {}).values():
            _hide_flag_types(sub)


#: Each top-level command and the module of parkgate.cli that defines it, in
#: help order (typer lists a group's own commands before its sub-groups).
COMMANDS = {
    "serve": "serve",
    "worker": "worker_cmd",
    "api": "api_cmd",
    "approve": "decide",
    "deny": "decide",
    "cancel": "decide",
    "db": "db",
    "keys": "keys",
    "workspaces": "workspaces",
    "calls": "calls",
    "remembered": "remembered",
    "approvers": "approvers",
    "audit": "audit",
    "tools": "tools",
    "config": "config",
    "policy": "policy",
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini": "gemini",
    "opencode": "opencode",
    "hook": "hook",
}


def load_command(name: str) -> Any:
    """The click command `name`, from its module (COMMANDS), flags shown without type."""
    holder = typer.Typer()
    _register(holder, COMMANDS[name])
    command = typer.main.get_group(holder).commands.get(name)
    if command is None:
        raise RuntimeError(f"parkgate.cli.{COMMANDS[name]} does not define the command {name!r}")
    _hide_flag_types(command)
    return command


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands by name: every name of COMMANDS is there, its module is
    imported the first time its command is read (listing names imports nothing)."""

    def __init__(self, loaded: MutableMapping[str, Any], load: Callable[[str], Any]) -> None:
        self._loaded = dict(loaded)
        self._load = load

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(COMMANDS), **self._loaded})

    def __len__(self) -> int:
        return len({**dict.fromkeys(COMMANDS), **self._loaded})


class ParkgateGroup(TyperGroup):
    """Root group whose `main` turns every failure into one line + an exit code,
    and whose commands load on first use (LazyCommands)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands, load_command)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names: a command's module loads when it is read

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
        _hide_flag_types(self, recurse=False)  # each command when it loads (load_command)
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
            return fail(exc.format_message(), EXIT_USAGE)  # type: ignore[attr-defined]
        except _ClickException as exc:
            code = getattr(exc, "exit_code", None) or EXIT_RUNTIME
            return fail(exc.format_message(), code)  # type: ignore[attr-defined]
        except typer.Abort:
            return failed(KeyboardInterrupt())
        except typer.Exit as exc:
            return int(exc.exit_code or 0)
        except (Exception, KeyboardInterrupt) as exc:
            return failed(exc)
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


def _register(root: typer.Typer, name: str) -> None:
    """Add the commands of module parkgate.cli.`name` to `root`."""
    module = importlib.import_module(f"parkgate.cli.{name}")
    register = getattr(module, "register", None)
    if callable(register):
        register(root)
        return
    sub = getattr(module, "app", None)
    if isinstance(sub, typer.Typer):
        root.add_typer(sub, name=getattr(module, "NAME", name))
        return
    raise RuntimeError(f"parkgate.cli.{name} defines neither `app` nor `register(app)`")


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (`parkgate`): run the command, then end the
    process (`parkgate.cli.process_exit`: past a Temporal runtime, without the
    interpreter teardown that can abort it)."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="parkgate")
    except SystemExit as exc:
        finish(exit_code_of(exc))
    finish(0)
