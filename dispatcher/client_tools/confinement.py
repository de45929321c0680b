"""Where an agent's own tools may reach: its session's workspace, and never
parkgate's own files.

Claude Code runs its tools as the OS user it runs as, in the quick-start the
user `parkgate serve` runs as: a `Read` of the data directory's link-secret
would hand the agent the key that signs approval links for its own parked
calls. So a call's paths are resolved as the agent's tool will resolve them
(against the event's `cwd`, `..` and symlinks followed) and judged:

- inside a protected path (a parkgate data directory, a secret file, a log,
  another project's workspace), or a directory holding one outside the
  workspace: denied, whatever a rule or a remembered decision says;
- outside the session's workspace: never allowed by policy alone (a person
  decides, or it is denied: `claude_code_outside_workspace`).

A `Bash` command is read by parkgate's shell tokenizer (and its raw text split
at shell metacharacters) and denied when a word names a protected path. That
is best effort: a command can build a path at run time (`$(...)`, variables
other than HOME, `cd` then a relative name); the sandbox and a separate OS
user are what stop those (docs/CLAUDE_CODE.md).

Pure apart from resolving paths on this host's disk (os.path.realpath).
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from parkgate.rules.shellwords import parse

#: Claude Code's tools that take a path, and the input fields holding it.
PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "Read": ("file_path",), "Write": ("file_path",), "Edit": ("file_path",),
    "MultiEdit": ("file_path",), "NotebookRead": ("notebook_path",),
    "NotebookEdit": ("notebook_path",), "Grep": ("path",), "Glob": ("path",),
    "LS": ("path",),
}
#: Tools whose missing `path` means the working directory (they search it).
SEARCH_TOOLS = frozenset({"Grep", "Glob", "LS"})
#: The shell tools whose `command` is read for paths.
SHELL_TOOLS = frozenset({"Bash"})
#: Where a shell word is cut into candidate paths (metacharacters, quotes, `=`).
_CUT = re.compile(r"[\s'\"<>|;&()`=,]+")
_GLOB = re.compile(r"[*?\[]")
_HOME_VAR = re.compile(r"^(\$HOME|\$\{HOME\})(?=/|$)")
#: Words of one command line looked at, at most.
MAX_WORDS = 2000


@dataclass(frozen=True)
class Protected:
    """A path no agent tool may reach, and what it is (for the reason)."""

    path: str
    what: str


@dataclass(frozen=True)
class Reach:
    """What one call's paths reach: the first protected path it names (and why),
    and the first path outside the session's workspace."""

    denied: str | None = None
    outside: str | None = None


def inside(path: str, root: str) -> bool:
    """`path` is `root` or lies inside it (both resolved)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(raw: str, cwd: str, home: str) -> str:
    """`raw` as the tool resolves it: `~` and `$HOME` expanded, relative to
    `cwd`, `..` and symlinks followed (a missing tail is kept as written)."""
    expanded = _expand_home(raw, home)
    return os.path.realpath(os.path.join(cwd, expanded))


def _expand_home(raw: str, home: str) -> str:
    if raw == "~" or raw.startswith("~/"):
        return home + raw[1:]
    return _HOME_VAR.sub(lambda _m: home, raw)


def tool_paths(tool_name: str, tool_input: Mapping[str, Any], cwd: str,
               home: str) -> tuple[list[str], list[str]]:
    """The resolved paths a path-taking tool's call names, and the glob
    patterns (absolute, normalized) a `Glob` that climbs out of its path names."""
    fields = PATH_FIELDS.get(tool_name, ())
    paths: list[str] = []
    for field in fields:
        value = tool_input.get(field)
        if isinstance(value, str) and value and "\x00" not in value:
            paths.append(resolve(value, cwd, home))
        elif tool_name in SEARCH_TOOLS and field == "path" and not value:
            paths.append(os.path.realpath(cwd))
    patterns: list[str] = []
    pattern = tool_input.get("pattern")
    if tool_name == "Glob" and isinstance(pattern, str) and "\x00" not in pattern:
        base = paths[0] if paths else os.path.realpath(cwd)
        full = posixpath.normpath(os.path.join(base, _expand_home(pattern, home)))
        if not inside(full, base):
            patterns.append(full)
            paths.append(os.path.realpath(_literal_prefix(full)))
    return paths, patterns


def _literal_prefix(pattern: str) -> str:
    """The directory a glob pattern starts from (before its first wildcard)."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if _GLOB.search(part):
            return "/".join(parts[:i]) or "/"
    return pattern


def command_words(command: str) -> list[str]:
    """The words of a shell command line that may be paths: the tokenizer's
    words of every command (nested ones too) and the raw text cut at shell
    metacharacters (redirection targets, `--opt=PATH`)."""
    words: list[str] = []
    for cmd in parse(command).commands:
        words += [cmd.program, *cmd.args]
    words += _CUT.split(command)
    seen: dict[str, None] = {}
    for word in words:
        for piece in _CUT.split(word) if word else ():
            if piece and piece not in seen:
                seen[piece] = None
    return list(seen)[:MAX_WORDS]


def judge(paths: Iterable[str], *, workspace: str, protected: Sequence[Protected],
          patterns: Iterable[str] = (), holding: bool = True) -> Reach:
    """What resolved `paths` (and glob `patterns`) reach. With `holding`, a
    directory outside the workspace that holds a protected path reaches it too
    (a search of `/` would read it); inside the workspace it does not (a
    workspace should not hold parkgate's data; ripgrep skips hidden ones)."""
    ws = os.path.realpath(workspace)
    outside: str | None = None
    for path in paths:
        for p in protected:
            if inside(path, p.path):
                return Reach(denied=f"{path} is {_within(path, p)}")
            if holding and inside(p.path, path) and not inside(path, ws):
                return Reach(denied=f"{path} holds {p.what} ({p.path})")
        if outside is None and not inside(path, ws):
            outside = path
    for pattern in patterns:
        for p in protected:
            if glob_reaches(pattern, p.path):
                return Reach(denied=f"the pattern {pattern} reaches {p.what} ({p.path})")
    return Reach(outside=outside)


def _within(path: str, p: Protected) -> str:
    return p.what if path == p.path else f"inside {p.what} ({p.path})"


def glob_reaches(pattern: str, path: str) -> bool:
    """A glob pattern (absolute, normalized) can match `path` or something in it."""
    want = [c for c in pattern.split("/") if c]
    have = [c for c in path.split("/") if c]
    if "**" in want:
        want = want[:want.index("**")]
        if len(want) > len(have):
            return False
    elif len(want) < len(have):
        return False
    return all(_matches(h, w) for h, w in zip(have, want, strict=False))


def _matches(name: str, part: str) -> bool:
    """One path component against one glob component (a leading dot is matched
    only by a pattern that starts with one, as the shell does)."""
    if name.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, part)


def command_paths(command: str, cwd: str, home: str) -> tuple[list[str], list[str]]:
    """The resolved paths and the glob patterns (absolute, normalized) the
    words of a shell command may name (best effort, see the module docstring)."""
    paths: list[str] = []
    patterns: list[str] = []
    for word in command_words(command):
        # No exec takes a NUL byte; a shell reading a script drops it: judge the
        # word as such a shell would read it (os.path refuses a NUL).
        word = word.replace("\x00", "")
        if _GLOB.search(word):
            patterns.append(posixpath.normpath(os.path.join(cwd, _expand_home(word, home))))
        else:
            paths.append(resolve(word, cwd, home))
    return paths, patterns


def command_reach(command: str, *, cwd: str, home: str,
                  protected: Sequence[Protected]) -> Reach:
    """The first protected path a shell command names; a command is never
    judged for leaving the workspace (it names /usr/bin and /tmp all day)."""
    paths, patterns = command_paths(command, cwd, home)
    found = judge(paths, workspace=cwd, protected=protected, patterns=patterns, holding=False)
    return Reach(denied=found.denied)
