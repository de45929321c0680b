"""What parkgate owns on this host, found rather than configured: its code, its
Python environment and its logs.

A tool that can write the worker's code or virtualenv plants code the worker
runs at its next start, with every secret; a tool that can read the log of
`parkgate serve` reads the API keys it printed. The sandbox makes the first
read-only and hides the second (parkgate.sandbox.launch).
"""

from __future__ import annotations

import functools
import logging
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from parkgate.sandbox.plan import contains

#: Where journald keeps the logs of a service (`parkgate worker` under systemd).
JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths, resolved, without those inside another one (sorted)."""
    resolved = sorted({os.path.realpath(p) for p in paths if p})
    kept: list[str] = []
    for path in resolved:
        if not any(contains(k, path) for k in kept):
            kept.append(path)
    return kept


def _package_dirs() -> list[str]:
    """Directories parkgate's code is imported from: the package directories and,
    for an editable install whose package is a tree of links, the source
    directories the links point into."""
    # The package this module belongs to (already loaded: importing it here
    # would make the sandbox depend on everything parkgate/__init__ exports).
    parkgate = sys.modules[__name__.partition(".")[0]]

    found: list[str] = []
    for location in parkgate.__path__:
        found.append(location)
        for root, dirs, files in os.walk(location):
            for name in (*dirs, *files):
                path = os.path.join(root, name)
                if os.path.islink(path):
                    found.append(os.path.dirname(os.path.realpath(path)))
    return found


def _project_root(dirs: list[str]) -> list[str]:
    """For an editable install, the source checkout holding every package directory
    (one read-only mount instead of one per directory; its .git and tests too)."""
    sources = outermost(d for d in dirs if "site-packages" not in d and "dist-packages" not in d)
    if not sources:
        return dirs
    common = os.path.commonpath(sources)
    for candidate in (common, *[str(p) for p in Path(common).parents]):
        if any(os.path.exists(os.path.join(candidate, f)) for f in ("pyproject.toml", "setup.py")):
            return [candidate, *(d for d in dirs if not contains(candidate, d))]
        if candidate == "/":
            break
    return dirs


def _python_dirs() -> list[str]:
    """The interpreter's environment: the venv (scripts, site-packages, .pth files)
    and the base interpreter's installation (its standard library and binary)."""
    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    import site

    if site.ENABLE_USER_SITE and site.USER_SITE and os.path.isdir(site.USER_SITE):
        found.append(site.USER_SITE)
    return found


@functools.lru_cache(maxsize=1)
def installation_paths() -> tuple[str, ...]:
    """parkgate's code and Python environment, outermost directories only, never `/`."""
    return tuple(p for p in outermost([*_project_root(_package_dirs()), *_python_dirs()])
                 if p != "/")


#: Per-mount flags a bind mount keeps when made read-only (in a user namespace the
#: kernel refuses a remount that would clear them).
_KEPT_FLAGS = ("nosuid", "nodev", "noexec", "noatime", "nodiratime", "relatime", "strictatime")


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field


def mount_flags(path: str) -> str:
    """The kept per-mount flags of the mount `path` lies on ("nosuid,nodev", ...)."""
    best, flags = "", ""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        point = _unescape(fields[4])
        if contains(point, path) and len(point) >= len(best):
            best = point
            flags = ",".join(f for f in fields[5].split(",") if f in _KEPT_FLAGS)
    return flags


def _regular_file(fd: int) -> str | None:
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _handler_files() -> list[str]:
    loggers = [logging.getLogger(), *(
        logger for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    )]
    found: list[str] = []
    for logger in loggers:
        for handler in logger.handlers:
            name = getattr(handler, "baseFilename", None)
            if isinstance(name, str):
                found.append(name)
    return found


def log_paths() -> list[str]:
    """This process's logs: stdout/stderr when they are files (`parkgate serve >
    serve.log` holds the API keys it printed), logging file handlers, and the
    journal directories (a service's stdout under systemd)."""
    found = [path for fd in (1, 2) if (path := _regular_file(fd)) is not None]
    found += _handler_files()
    found += [d for d in JOURNAL_DIRS if os.path.isdir(d)]
    unique: list[str] = []
    for path in found:
        if Path(path).is_absolute() and path not in unique and not path.endswith(" (deleted)"):
            unique.append(path)
    return unique


def file_tool_limits(hidden: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """WorkspaceFileAPI's `off_limits` and `read_only` for in-process file tools:
    the hidden paths and this process's logs; parkgate's installation."""
    return {"off_limits": (*hidden, *log_paths()), "read_only": installation_paths()}
