"""How /bin/sh splits a command line into words and operators: the lexer.

Quote removal, backslash escapes and substitutions follow sh; what a word
depends on at run time (expansion, globs, control characters) is noted on the
word (`Word.unsure`), and command texts inside substitutions are kept for the
parser (`Word.nested`). parkgate.rules.shellwords turns these tokens into commands.

Pure: no I/O, the standard library only (it also runs in workflow code).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

BLANKS = " \t"
#: Characters that end a word outside quotes.
_METAS = frozenset(" \t\n;&|()<>")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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


def is_control(ch: str) -> bool:
    """Characters sh and a reader see differently: control (tab excepted),
    format (bidi overrides, zero-width), line/paragraph separators, surrogates."""
    if ch == "\t":
        return False
    return unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Cs"}


@dataclass
class Op:
    """An operator token (``&&``, ``|``, ``;``, a newline, a redirection...)."""

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


def _substitution(text: str, i: int, word: Word, out: list[str]) -> int:
    """A backtick substitution at ``text[i] == '`'``, quoted or not: record it in
    ``word``, return the next index, or -1 when it is unbalanced."""
    content, end = _backtick(text, i)
    word.unsure.append("command substitution")
    word.nested.append(content)
    if end < 0:
        word.unsure.append("unbalanced backtick")
        return -1
    out.append(text[i:end])
    return end


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


def _expansion(text: str, i: int, word: Word, out: list[str]) -> int:
    """A ``$`` expansion or a backtick substitution at ``i`` (quoted or not):
    the index after it, or -1 for an unbalanced backtick."""
    if text[i] == "$":
        return _dollar(text, i, word, out)
    return _substitution(text, i, word, out)


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
        if ch in "$`":
            i = _expansion(text, i, word, out)
            if i < 0:  # an unbalanced backtick ran to the end
                return n
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
        if ch in "$`":
            i = _expansion(text, i, word, out)
            if i < 0:  # an unbalanced backtick ran to the end
                i = n
                break
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


def lex(text: str) -> tuple[list[Word | Op], list[str]]:
    """Words and operators of ``text``, and reasons the line is not certain."""
    tokens: list[Word | Op] = []
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
            tokens.append(Op(op, i, i + len(op)))
            i += len(op)
            continue
        word = _word(text, i)
        tokens.append(word)
        i = word.end
    return tokens, reasons
