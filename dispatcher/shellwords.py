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

Pure: no I/O, the standard library only (it also runs in workflow code).
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

BLANKS = " \t"
#: Characters that end a word outside quotes.
_METAS = frozenset(" \t\n;&|()<>")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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


@dataclass
class Word:
    """One shell word: its text after quote removal and what it depends on."""

    value: str
    raw: str
    start: int
    end: int
    #: Why the word is not a fixed string (expansion, glob, control character...).
    unsure: list[str] = field(default_factory=list)
    #: Command texts found in substitutions inside the word.
    nested: list[str] = field(default_factory=list)


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


def is_control(ch: str) -> bool:
    """Characters sh and a reader see differently: control (tab excepted),
    format (bidi overrides, zero-width), line/paragraph separators, surrogates."""
    if ch == "\t":
        return False
    return unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Cs"}


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
# Lexer
# --------------------------------------------------------------------------


@dataclass
class _Op:
    op: str
    start: int
    end: int


def _matching_paren(text: str, i: int) -> int:
    """Index just past the ``)`` closing the ``(`` before ``i`` (-1 if none)."""
    depth, n = 1, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'":
            j = text.find("'", i + 1)
            if j < 0:
                return -1
            i = j + 1
            continue
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _backtick(text: str, i: int) -> tuple[str, int]:
    """Content of a backtick substitution starting after ``i`` and the index past it."""
    out: list[str] = []
    n = len(text)
    j = i + 1
    while j < n and text[j] != "`":
        if text[j] == "\\" and j + 1 < n and text[j + 1] in "`\\$":
            out.append(text[j + 1])
            j += 2
            continue
        out.append(text[j])
        j += 1
    return "".join(out), (j + 1 if j < n else -1)


def _dollar(text: str, i: int, word: Word, out: list[str]) -> int:
    """An expansion at ``text[i] == '$'``: record it in ``word``, return the next index."""
    n = len(text)
    nxt = text[i + 1] if i + 1 < n else ""
    if nxt == "(":
        if text.startswith("((", i + 1):
            end = _matching_paren(text, i + 2)
            word.unsure.append("arithmetic expansion")
        else:
            end = _matching_paren(text, i + 2)
            word.unsure.append("command substitution")
            word.nested.append(text[i + 2 : end - 1] if end > 0 else text[i + 2 :])
        if end < 0:
            word.unsure.append("unbalanced parenthesis")
            end = n
        out.append(text[i:end])
        return end
    if nxt == "{":
        end = text.find("}", i + 2)
        end = n if end < 0 else end + 1
        word.unsure.append("parameter expansion")
        inner = text[i + 2 : end - 1]
        word.nested.extend(_substitutions(inner))
        out.append(text[i:end])
        return end
    if nxt and (_NAME.match(nxt) or nxt.isdigit() or nxt in "@*#?$!-"):
        m = _NAME.match(text, i + 1)
        end = m.end() if m else i + 2
        word.unsure.append("parameter expansion")
        out.append(text[i:end])
        return end
    if nxt in ("'", '"'):
        word.unsure.append("$'...' quoting")
    out.append("$")
    return i + 1


def _substitutions(text: str) -> list[str]:
    """Command texts of the ``$(...)`` and backtick substitutions in ``text``
    (a parameter expansion's word). Iterative: nesting cannot exhaust the stack."""
    found: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("$(", i) and not text.startswith("$((", i):
            end = _matching_paren(text, i + 2)
            found.append(text[i + 2 : end - 1] if end > 0 else text[i + 2 :])
            i = n if end < 0 else end
        elif text[i] == "`":
            content, end = _backtick(text, i)
            found.append(content)
            i = n if end < 0 else end
        else:
            i += 1
    return found


def _double_quoted(text: str, i: int, word: Word, out: list[str]) -> int:
    """A ``"..."`` starting at ``i``; returns the index past the closing quote."""
    n = len(text)
    i += 1
    while i < n:
        ch = text[i]
        if ch == '"':
            return i + 1
        if ch == "\\" and i + 1 < n:
            if text[i + 1] in '$`"\\':
                out.append(text[i + 1])
                i += 2
                continue
            if text[i + 1] == "\n":
                i += 2
                continue
            out.append("\\")
            i += 1
            continue
        if ch == "$":
            i = _dollar(text, i, word, out)
            continue
        if ch == "`":
            content, end = _backtick(text, i)
            word.unsure.append("command substitution")
            word.nested.append(content)
            if end < 0:
                word.unsure.append("unbalanced backtick")
                return n
            out.append(text[i:end])
            i = end
            continue
        out.append(ch)
        i += 1
    word.unsure.append("unbalanced double quote")
    return n


def _word(text: str, i: int) -> Word:
    """The word starting at ``i`` (not a blank or an operator)."""
    n = len(text)
    start = i
    word = Word(value="", raw="", start=i, end=i)
    out: list[str] = []
    braces: list[str] = []  # unquoted braces: bash (some systems' sh) expands {a,b}
    while i < n:
        ch = text[i]
        if ch in _METAS:
            break
        if ch == "\\":
            if i + 1 >= n:
                word.unsure.append("trailing backslash")
                out.append("\\")
                i += 1
                continue
            if text[i + 1] == "\n":  # line continuation
                i += 2
                continue
            out.append(text[i + 1])
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                word.unsure.append("unbalanced single quote")
                out.append(text[i + 1 :])
                i = n
                break
            out.append(text[i + 1 : end])
            i = end + 1
            continue
        if ch == '"':
            i = _double_quoted(text, i, word, out)
            continue
        if ch == "$":
            i = _dollar(text, i, word, out)
            continue
        if ch == "`":
            content, end = _backtick(text, i)
            word.unsure.append("command substitution")
            word.nested.append(content)
            if end < 0:
                word.unsure.append("unbalanced backtick")
                i = n
                break
            out.append(text[i:end])
            i = end
            continue
        if ch in "*?[":
            word.unsure.append("pathname pattern")
        if ch == "~" and i == start:
            word.unsure.append("tilde expansion")
        if ch in "{}":
            braces.append(ch)
        out.append(ch)
        i += 1
    word.value = "".join(out)
    word.raw = text[start:i]
    word.end = i
    if any(is_control(c) for c in word.value):
        word.unsure.append("control character")
    if "{" in braces and "}" in braces and ("," in word.value or ".." in word.value):
        word.unsure.append("brace expansion")
    return word


_OPERATORS = ("&&", "||", ";;", "|&", ";&", "<<-", "<<", ">>", "<&", ">&", "<>", ">|",
              ";", "&", "|", "(", ")", "<", ">", "\n")


def lex(text: str) -> tuple[list[Word | _Op], list[str]]:
    """Words and operators of ``text``, and reasons the line is not certain."""
    tokens: list[Word | _Op] = []
    reasons: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in BLANKS:
            i += 1
            continue
        if ch == "#":
            reasons.append("comment")
            break
        if ch in _METAS:
            op = next(o for o in _OPERATORS if text.startswith(o, i))
            if op in ("<", ">") and text.startswith("(", i + 1):
                reasons.append("process substitution")
            tokens.append(_Op(op, i, i + len(op)))
            i += len(op)
            continue
        word = _word(text, i)
        tokens.append(word)
        i = word.end
    return tokens, reasons


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
        if isinstance(tok, _Op):
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
