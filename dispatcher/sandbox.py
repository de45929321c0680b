"""Where a tool's child process starts: allowlisted environment, and on Linux a sandbox.

The worker and its tools run as the same user, so a 0700 data directory does
not stop `cat $DATA_DIR/link-secret`. A sandboxed child runs under `unshare`
(util-linux) in new mount and pid namespaces (plus a user namespace when the
worker is not root), where

- a read-only, empty tmpfs covers every hidden directory (the data directory,
  the directories of configured secret files, `tool_hidden_paths`) and
  /dev/null covers every hidden file;
- /proc is remounted, so the worker's /proc/<pid>/environ, /proc/<pid>/root
  and open files are out of sight;
- `setpriv --no-new-privs --bounding-set=-all` drops every capability before
  the tool runs, so it cannot unmount the tmpfs or regain privileges through
  a setuid binary;
- everything in the namespace is killed when the tool's shell exits or the
  call is cancelled (`--kill-child`; the namespace's pid 1 going away).

The network is NOT isolated (see docs/OPERATIONS.md, "Security model").

`tool_sandbox`: `auto` uses the sandbox when a probe shows it works and logs
one warning when it does not; `required` refuses to start a tool process
(an error result for the model) when it does not; `off` never uses it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from parkgate.context import ToolContext
from parkgate.errors import ToolExecutionError
from parkgate.toolenv import tool_environment
from parkgate.truncation import Limits

log = logging.getLogger("parkgate.sandbox")

SandboxMode = Literal["auto", "required", "off"]
#: Exit status of the sandbox script when it could not hide a path (nothing ran).
SETUP_FAILED = 125
_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Runs as pid 1 of the new namespaces, with the namespace's full capabilities:
# hide each path, then run the tool with no capabilities as a child (not exec:
# pid 1 ignores signals it has no handler for, so the tool must not be pid 1
# or SIGTERM on cancel would not reach it). Its exit status is the tool's.
_SCRIPT = r"""
mount_bin=$1; setpriv_bin=$2; shift 2
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  if [ -d "$1" ]; then
    "$mount_bin" -t tmpfs -o ro,nosuid,nodev,noexec,size=4k,mode=0555 parkgate-hidden "$1" \
      || { echo "parkgate sandbox: could not hide $1" >&2; exit 125; }
  elif [ -e "$1" ]; then
    "$mount_bin" --bind /dev/null "$1" \
      || { echo "parkgate sandbox: could not hide $1" >&2; exit 125; }
  fi
  shift
done
shift
"$setpriv_bin" --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"
exit $?
"""


def unshare_argv(unshare: str, *, as_root: bool) -> list[str]:
    """The namespace part; a user namespace (mapped root) when not really root."""
    user = [] if as_root else ["--user", "--map-root-user"]
    return [
        unshare, *user, "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
        "--propagation", "private", "--",
    ]


def _tools(unshare: str) -> tuple[str, str, str] | str:
    """(unshare, mount, setpriv) as absolute paths, or why they cannot be found."""
    found: list[str] = []
    for name in (unshare, "mount", "setpriv"):
        path = shutil.which(name, path=_SEARCH_PATH) if os.sep not in name else name
        if path is None or not os.access(path, os.X_OK):
            return f"{name!r} not found or not executable"
        found.append(path)
    return found[0], found[1], found[2]


def sandboxed(
    argv: Sequence[str], hidden: Iterable[str], unshare: str = "unshare"
) -> list[str]:
    """`argv` wrapped to run in the sandbox with `hidden` paths covered."""
    tools = _tools(unshare)
    if isinstance(tools, str):
        raise FileNotFoundError(tools)
    unshare_path, mount_path, setpriv_path = tools
    return [
        *unshare_argv(unshare_path, as_root=os.geteuid() == 0),
        "/bin/sh", "-c", _SCRIPT, "parkgate-sandbox", mount_path, setpriv_path,
        *hidden, "--", *argv,
    ]


@functools.lru_cache(maxsize=8)
def probe(unshare: str = "unshare") -> str | None:
    """None when the sandbox works here, else why not (cached per binary).

    Runs the real thing once: hide a directory holding a file, then check from
    inside that the file is gone and that no capability is left.
    """
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    with tempfile.TemporaryDirectory(prefix="parkgate-probe-") as tmp:
        secret = Path(tmp) / "hidden"
        secret.mkdir()
        (secret / "s").write_text("x")
        check = f"! test -e {secret}/s && grep -q 'CapEff:[[:space:]]*0*$' /proc/self/status"
        try:
            argv = sandboxed(["/bin/sh", "-c", check], [str(secret)], unshare)
            done = subprocess.run(
                argv, capture_output=True, timeout=10, cwd=tmp, env={"PATH": _SEARCH_PATH},
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{unshare} failed (exit {done.returncode}): {detail[-1] if detail else 'no output'}"
    return None


_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def unavailable_message(reason: str) -> str:
    """The error a tool call gets under `required` when the sandbox cannot start."""
    return (
        f"The tool sandbox could not be set up on this worker ({reason}); tool_sandbox is "
        "'required', so the command was not run. An operator must fix the sandbox "
        "(see docs/OPERATIONS.md, Security model) or change tool_sandbox."
    )


_probed: set[str] = set()


async def sandbox_reason(unshare: str) -> str | None:
    """Why the sandbox cannot be used (None when it can); the first probe runs in a
    thread so the event loop is not blocked, later ones hit the cache."""
    if unshare in _probed:
        return probe(unshare)
    reason = await asyncio.to_thread(probe, unshare)
    _probed.add(unshare)
    return reason


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def paths_to_hide(limits: Limits, workspace: str) -> list[str]:
    """The hidden paths, resolved, minus any that is the workspace or above it
    (covering those would hide the workspace itself; one warning each)."""
    ws = os.path.realpath(workspace)
    kept: list[str] = []
    for raw in limits.tool_hidden_paths:
        path = os.path.realpath(raw)
        if _contains(path, ws):
            _warn_once(
                f"contains:{path}:{ws}",
                "tool_hidden_paths: %s is or holds the workspace %s; not hidden for it",
                path, ws,
            )
            continue
        if path not in kept:
            kept.append(path)
    return kept


def state_line(mode: str, reason: str | None, hidden: int) -> str:
    """One line saying what the sandbox does here (start-up log, `config check`)."""
    if mode == "off":
        return "tool sandbox: off (tools can read the data directory; see docs/OPERATIONS.md)"
    if reason is None:
        return f"tool sandbox: on ({hidden} paths hidden from tools; network not isolated)"
    if mode == "required":
        return f"tool sandbox: REQUIRED BUT UNAVAILABLE ({reason}); tool processes will be refused"
    return f"tool sandbox: unavailable ({reason}); tools run unsandboxed (tool_sandbox: auto)"


async def announce(limits: Limits) -> str:
    """Probe at start-up and log the sandbox state once (error under required)."""
    reason = None if limits.tool_sandbox == "off" else await sandbox_reason(
        limits.tool_sandbox_unshare
    )
    line = state_line(limits.tool_sandbox, reason, len(limits.tool_hidden_paths))
    if reason is not None and limits.tool_sandbox == "required":
        log.error("%s", line)
    elif reason is not None or limits.tool_sandbox == "off":
        _warned.add(f"auto:{limits.tool_sandbox_unshare}")
        log.warning("%s", line)
    else:
        log.info("%s", line)
    return line


async def tool_command(argv: Sequence[str], context: ToolContext) -> list[str]:
    """`argv` as it must be started for this call: sandboxed, or as is.

    Raises ToolExecutionError (an error result, nothing started) under
    `required` when the sandbox is unavailable.
    """
    limits = context.limits
    if limits.tool_sandbox == "off":
        return list(argv)
    reason = await sandbox_reason(limits.tool_sandbox_unshare)
    if reason is not None:
        if limits.tool_sandbox == "required":
            raise ToolExecutionError(unavailable_message(reason))
        _warn_once(
            f"auto:{limits.tool_sandbox_unshare}",
            "tool sandbox unavailable (%s): tools run unsandboxed and can read the data "
            "directory; set tool_sandbox: required to refuse instead",
            reason,
        )
        return list(argv)
    return sandboxed(argv, paths_to_hide(limits, context.workspace_path),
                     limits.tool_sandbox_unshare)


async def spawn_tool_process(
    argv: Sequence[str], context: ToolContext, **kwargs: Any
) -> asyncio.subprocess.Process:
    """Start a tool's child: in the workspace, in its own process group, with the
    allowlisted environment, sandboxed per `tool_sandbox`. The one place tools spawn."""
    command = await tool_command(argv, context)
    return await asyncio.create_subprocess_exec(
        *command,
        cwd=context.workspace_path,
        env=tool_environment(context.workspace_path, context.limits.tool_env_passthrough),
        start_new_session=True,
        **kwargs,
    )
