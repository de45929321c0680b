"""How /bin/sh will read a command line: the one tokenizer every command rule uses.

Remembered prefixes, ``command:`` rules and ``command_pattern`` rules all judge
the words this module reads, never a second opinion (``shlex`` treats ``\\r`` as
a blank; ``/bin/sh`` does not). Only space and tab separate words and newline
separates commands, as in sh. What cannot change the program that runs is
normalized away: quotes, backslash escapes, ``command``/``exec``/``env`` and the
configured wrappers (``nice``, ``timeout``, ...) with their options, variable
assignments, and a path to the program (matched by its basename; the path is
kept for the approver).

A line is *certain* when nothing in it depends on the run: no expansion
(``$x``, ``$(..)``, backticks, globs, ``~``), redirection, comment, compound command,
control character, unbalanced quote or unknown wrapper option. Only certain
lines may satisfy an allow rule; deny and other strict rules still judge every
command they can see, including those inside substitutions, ``sh -c`` strings
and every guess at a wrapper with options this module does not know.

The words come from parkgate.rules.shell_lex (the lexer); this module turns them
into commands and judges their certainty.

Pure: no I/O (it also runs in workflow code).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from parkgate.rules.shell_lex import Op, Word, is_control, lex

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
#: Reserved words that open or close a compound command (never certain).
_COMPOUND = frozenset({
    "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while",
    "until", "for", "in", "function", "select", "[[", "]]", "coproc",
})
#: Reserved words that only group or negate: they never change the program.
_GROUPING = frozenset({"!", "{", "}"})
#: Shells whose ``-c STRING`` is read as nested commands (strict rules judge it).
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})


class WrapperShape(BaseModel):
    """The option shape of a program that runs another one (``nice -n 5 cmd``).

    ``flags`` take no value, ``options`` take one (next word, ``-n5`` or
    ``--adjustment=5``), ``operands`` are positional words before the command
    (timeout's DURATION). An option not listed makes the line uncertain.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: list[str] = Field(default_factory=list)
    options: list[str] = Field(default_factory=list)
    operands: int = Field(default=0, ge=0, le=4)


#: Wrappers normalized unless a policy's ``command_wrappers`` says otherwise.
DEFAULT_WRAPPERS: dict[str, WrapperShape] = {
    "nice": WrapperShape(options=["-n", "--adjustment"]),
    "timeout": WrapperShape(
        flags=["--preserve-status", "--foreground", "-v", "--verbose"],
        options=["-s", "--signal", "-k", "--kill-after"],
        operands=1,
    ),
    "nohup": WrapperShape(),
    "time": WrapperShape(flags=["-p"]),
}


@dataclass(frozen=True)
class Command:
    """One simple command as it will run, after normalization."""

    #: The program as written (quotes removed), e.g. ``/usr/bin/kubectl``.
    program: str
    #: Its arguments (quotes removed).
    args: tuple[str, ...]
    #: The source text of this command (for the approver and old callers).
    raw: str
    #: Assignments or ``env`` options changed its environment.
    env_changed: bool = False
    #: A wrapper was named by a path (``./env``): it may not be the real one.
    wrapper_path: bool = False
    #: Found inside a substitution, an ``sh -c`` string or as a guess: strict
    #: rules judge it, it never counts towards an allow.
    nested: bool = False

    @property
    def name(self) -> str:
        """The program's basename (``/usr/bin/kubectl`` -> ``kubectl``)."""
        return basename(self.program)

    @property
    def words(self) -> tuple[str, ...]:
        """Words with the program by basename: what strict rules compare."""
        return (self.name, *self.args) if self.program else self.args

    @property
    def written(self) -> tuple[str, ...]:
        """Words with the program as written: what allow rules compare."""
        return (self.program, *self.args) if self.program else self.args

    @property
    def text(self) -> str:
        """``words`` rendered for regex rules (control characters escaped)."""
        return render(self.words)

    @property
    def written_text(self) -> str:
        return render(self.written)

    @property
    def has_path(self) -> bool:
        return "/" in self.program


@dataclass(frozen=True)
class CommandLine:
    """A whole line: its commands (in order, nested ones after) and certainty."""

    commands: tuple[Command, ...]
    #: Why the line is not certain ([] when it is).
    reasons: tuple[str, ...]

    @property
    def certain(self) -> bool:
        return not self.reasons

    @property
    def top(self) -> tuple[Command, ...]:
        """The commands the line runs itself (not nested, not guesses)."""
        return tuple(c for c in self.commands if not c.nested)

    def plain(self, command: Command) -> bool:
        """Whether an allow rule may judge ``command``: the line is certain,
        the environment is untouched and no wrapper was named by a path."""
        return (
            self.certain and not command.nested and not command.env_changed
            and not command.wrapper_path
        )


def basename(program: str) -> str:
    """The last path component (``uname\\r-a\\r/../../usr/bin/python3`` -> ``python3``)."""
    tail = program.rstrip("/").rsplit("/", 1)[-1]
    return tail or program


def render_word(word: str) -> str:
    """One word for regex matching: control characters as ``\\xNN``, quoted
    when it holds a blank, a quote or a backslash, or is empty."""
    shown = "".join(f"\\x{ord(c):02x}" if is_control(c) or c == "\n" else c for c in word)
    if shown == "" or any(c in shown for c in " \t'\"\\"):
        return shlex.quote(shown)
    return shown


def render(words: tuple[str, ...] | list[str]) -> str:
    return " ".join(render_word(w) for w in words)


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------

_SEPARATORS = frozenset({"&&", "||", ";;", "|&", ";&", ";", "&", "|", "\n", "(", ")"})


def parse(text: str, wrappers: Mapping[str, WrapperShape] | None = None) -> CommandLine:
    """``text`` as /bin/sh will read it: its simple commands, normalized."""
    shapes = DEFAULT_WRAPPERS if wrappers is None else wrappers
    commands: list[Command] = []
    reasons: list[str] = []
    _parse_into(text, shapes, commands, reasons, nested=False, depth=0)
    return CommandLine(tuple(commands), tuple(dict.fromkeys(reasons)))


def _parse_into(
    text: str,
    shapes: Mapping[str, WrapperShape],
    commands: list[Command],
    reasons: list[str],
    *,
    nested: bool,
    depth: int,
) -> None:
    if depth > 8:
        reasons.append("nested too deep")
        return
    tokens, lex_reasons = lex(text)
    reasons.extend(lex_reasons)
    later: list[str] = []
    current: list[Word] = []
    at_start = True
    redirect_target = False
    depth_parens = 0

    def flush() -> None:
        if current:
            commands.extend(_commands_of(text, current, shapes, reasons, later, nested))
        current.clear()

    for tok in tokens:
        if isinstance(tok, Op):
            if tok.op in _SEPARATORS:
                if tok.op == "(" and not at_start:
                    reasons.append("function definition or misplaced parenthesis")
                depth_parens += {"(": 1, ")": -1}.get(tok.op, 0)
                if depth_parens < 0:
                    reasons.append("unbalanced parenthesis")
                if redirect_target:
                    reasons.append("redirection without a target")
                    redirect_target = False
                flush()
                at_start = True
                continue
            reasons.append("redirection")
            redirect_target = True
            continue
        reasons.extend(tok.unsure)
        later.extend(tok.nested)
        if redirect_target:
            redirect_target = False
            continue
        current.append(tok)
        at_start = False
    flush()
    if depth_parens > 0:
        reasons.append("unbalanced parenthesis")
    if redirect_target:
        reasons.append("redirection without a target")
    for inner in later:
        _parse_into(inner, shapes, commands, reasons, nested=True, depth=depth + 1)


def _commands_of(
    text: str,
    words: list[Word],
    shapes: Mapping[str, WrapperShape],
    reasons: list[str],
    later: list[str],
    nested: bool,
) -> list[Command]:
    """The simple command of ``words`` (plus guesses for strict rules)."""
    raw = text[words[0].start : words[-1].end].strip()
    # io numbers: `cmd 2>/dev/null` lexes `2` as a word followed by `>`.
    vals = [w for w in words if not (w.value.isdigit() and w.end < len(text)
                                     and text[w.end] in "<>" and w.raw == w.value)]
    # grouping / negation / compound keywords at the start
    while vals and vals[0].raw in _GROUPING | _COMPOUND:
        if vals[0].raw in _COMPOUND:
            reasons.append(f"compound command ({vals[0].raw})")
        vals = vals[1:]
    env_changed = False
    while vals and _ASSIGNMENT.match(vals[0].raw):
        env_changed = True
        vals = vals[1:]
    values = [w.value for w in vals]
    out: list[Command] = []
    wrapper_path = False
    guesses: list[list[str]] = []
    while values:
        name = basename(values[0])
        if name not in {"command", "exec", "env"} and name not in shapes:
            break
        rest = _unwrap(name, values, shapes, reasons, later)
        if rest == _STOP:
            break
        if rest == _GUESS:  # cannot unwrap with certainty: guess every non-option word
            guesses.extend(values[k:] for k in range(1, len(values))
                           if not values[k].startswith("-"))
            break
        assert not isinstance(rest, str)
        consumed, changed = rest
        if "/" in values[0]:
            wrapper_path = True
        env_changed = env_changed or changed
        values = values[consumed:]
    if values and basename(values[0]) in _SHELLS:
        later.extend(_shell_strings(values))
    if values and basename(values[0]) == "eval":
        later.append(" ".join(values[1:]))
    program, args = (values[0], tuple(values[1:])) if values else ("", ())
    if not values and not env_changed:  # only grouping words (`}`): runs nothing
        return out
    out.append(Command(program=program, args=args, raw=raw, env_changed=env_changed,
                       wrapper_path=wrapper_path, nested=nested))
    for guess in guesses:
        out.append(Command(program=guess[0], args=tuple(guess[1:]), raw=raw, nested=True))
    return out


def _shell_strings(values: list[str]) -> list[str]:
    """The ``-c STRING`` of a shell invocation (``sh -c``, ``bash -lc``)."""
    k = 1
    while k < len(values):
        word = values[k]
        if word in ("-o", "+o", "-O", "+O"):
            k += 2
            continue
        if word == "--" or not word.startswith(("-", "+")):
            break
        if not word.startswith("--") and "c" in word[1:]:
            return values[k + 1 : k + 2]
        k += 1
    return []


_STOP = "stop"
_GUESS = "guess"


def _unwrap(
    name: str,
    values: list[str],
    shapes: Mapping[str, WrapperShape],
    reasons: list[str],
    later: list[str],
) -> tuple[int, bool] | str:
    """How many words the wrapper at ``values[0]`` takes and whether it changes
    the environment; _STOP when the wrapper itself is the program (``nice``,
    ``command -v x``), _GUESS when it cannot be read with certainty."""
    k, n = 1, len(values)
    if n == 1:
        return _STOP
    if name == "command":
        while k < n and values[k].startswith("-") and values[k] != "-":
            if values[k] == "--":
                return (k + 1, False) if k + 1 < n else _STOP
            if "v" in values[k] or "V" in values[k]:
                return _STOP  # a lookup: runs nothing
            if values[k] != "-p":
                reasons.append(f"unknown option of command: {values[k]}")
                return _GUESS
            k += 1
        return (k, False) if k < n else _STOP
    if name == "exec":
        if values[k] == "--":
            k += 1
        elif values[k].startswith("-"):
            reasons.append(f"unknown option of exec: {values[k]}")
            return _GUESS
        return (k, False) if k < n else _STOP
    if name == "env":
        return _unwrap_env(values, reasons, later)
    shape = shapes[name]
    flags, options = set(shape.flags), set(shape.options)
    while k < n and values[k].startswith("-") and values[k] != "-":
        word = values[k]
        if word == "--":
            k += 1
            break
        if word in flags:
            k += 1
            continue
        if word in options:
            k += 2
            continue
        if any(word.startswith(o + "=") for o in options if o.startswith("--")) or any(
            word.startswith(o) and len(word) > len(o) for o in options
            if not o.startswith("--")
        ):
            k += 1
            continue
        reasons.append(f"unknown option of {name}: {word}")
        return _GUESS
    k += shape.operands
    return (k, False) if k < n else _STOP


_ENV_FLAGS = {"-0", "--null", "-v", "--debug"}
_ENV_CLEAR = {"-i", "--ignore-environment", "-"}
_ENV_UNSET = {"-u", "--unset"}


def _unwrap_env(values: list[str], reasons: list[str], later: list[str]) -> tuple[int, bool] | str:
    k, n = 1, len(values)
    changed = False
    options = True
    while k < n:
        word = values[k]
        if not options or word == "--":
            if word == "--" and options:
                options = False
                k += 1
                continue
            if _ASSIGNMENT.match(word):
                changed = True
                k += 1
                continue
            break
        if word in _ENV_FLAGS:
            k += 1
        elif word in _ENV_CLEAR:
            changed = True
            k += 1
        elif word in _ENV_UNSET:
            changed = True
            k += 2
        elif word.startswith("--unset=") or (word.startswith("-u") and len(word) > 2):
            changed = True
            k += 1
        elif word in ("-S", "--split-string") or word.startswith(("-S", "--split-string=")):
            string = values[k + 1] if word in ("-S", "--split-string") and k + 1 < n else (
                word.split("=", 1)[1] if word.startswith("--") else word[2:])
            later.append(string)
            reasons.append("env -S")
            return _GUESS
        elif word.startswith("-"):
            reasons.append(f"option of env: {word}")
            return _GUESS
        elif _ASSIGNMENT.match(word):
            changed = True
            k += 1
        else:
            break
    return (k, changed) if k < n else _STOP


def words_of(text: str) -> tuple[str, ...] | None:
    """The written words of ``text`` when it is one certain simple command, else None."""
    line = parse(text)
    if not line.certain or len(line.commands) != 1:
        return None
    return line.commands[0].written
