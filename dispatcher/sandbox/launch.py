"""Where a tool's child process starts: allowlisted environment, and on Linux a sandbox.

The worker and its tools run as the same user (unless `tool_user` names a
dedicated one), so a 0700 data directory does not stop
`cat $DATA_DIR/link-secret`. A sandboxed child runs under `unshare` (util-linux)
in new mount, pid and network namespaces (plus a user namespace when the worker
is not root), where

- the tool has a network namespace of its own (only its own loopback, brought
  up when `ip` is there): the host's loopback services (the Temporal frontend,
  PostgreSQL, the API) and everything else are out of reach, unless the tool is
  opted in by name (`tool_network_tools`) or by side-effect class
  (`tool_network_classes`);
- host services reached by a unix socket's path are out of sight too (a network
  namespace does not stop those): /run, /var/run, the history database's
  socket directory and `tool_service_paths` are covered, sockets and FIFOs in
  /tmp, /var/tmp, /var/lib, /var/spool and /dev are replaced by /dev/null,
  unless the tool is opted in by name (`tool_exposed_paths`); what /etc links
  to under /run (resolv.conf) stays readable (parkgate.sandbox.services);
- its workspace is bound writable; the roots of other workspaces, every
  parkgate data directory, the directories of configured secret files, the
  logs of this process and `tool_hidden_paths` are covered by an empty
  read-only tmpfs (a file by /dev/null); parkgate's code and Python environment
  and `tool_readonly_paths` are read-only (see parkgate.sandbox.plan; all set
  up by one `mount -a`, parkgate.sandbox.fstab); /dev/shm is private;
- /proc is remounted, so the worker's /proc/<pid>/environ, /proc/<pid>/root
  and open files are out of sight;
- `setpriv --no-new-privs --bounding-set=-all` drops every capability (and
  switches to `tool_user` when set) before the tool runs, so it cannot unmount
  a cover or regain privileges through a setuid binary;
- everything in the namespace is killed when the tool's shell exits or the
  call is cancelled (`--kill-child`; the namespace's pid 1 going away), and
  when the worker dies: `unshare` starts under `setpriv --pdeathsig KILL`, so
  a worker SIGKILLed mid-run (its call recorded "worker lost ... outcome
  unknown") takes the tool with it instead of leaving it changing the
  workspace after the record. The signal is the forking thread's death: the
  tool is spawned from the worker's event loop thread, which lives as long
  as the worker.

`tool_sandbox`: `auto` uses the sandbox when a probe shows it works and logs
one warning when it does not (also when only the network namespace does not
work: tools then share the host network); `required` refuses to start a tool
process (an error result for the model) when it does not; `off` never uses it.
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
from parkgate.sandbox.fstab import render
from parkgate.sandbox.paths import installation_paths, log_paths, mount_flags
from parkgate.sandbox.plan import MountPlan, build_plan, warn_once
from parkgate.sandbox.services import SERVICE_DIRS, endpoints, etc_files_under, exposed_paths
from parkgate.sandbox.tool_user import ToolUser, ToolUserError, resolve
from parkgate.sandbox.toolenv import tool_environment
from parkgate.truncation import Limits

log = logging.getLogger("parkgate.sandbox")

SandboxMode = Literal["auto", "required", "off"]
#: Exit status of the sandbox script when it could not set a mount up (nothing ran).
SETUP_FAILED = 125
_SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SETPRIV_DROP = ["--no-new-privs", "--bounding-set=-all", "--inh-caps=-all"]
#: `unshare` (and, through `--kill-child`, its namespace) is killed when the worker dies.
_DIE_WITH_WORKER = ["--pdeathsig", "KILL"]

# Runs as pid 1 of the new namespaces, with the namespace's full capabilities,
# in the workspace: give the namespace a private /dev/shm (the host's holds
# other processes' shared memory, PostgreSQL's among them), create there the
# empty files kept files of masked service directories are bound onto
# (parkgate.sandbox.fstab; `mkdir` only when there are any), write the mount
# plan's fstab there (parkgate.sandbox.plan, parkgate.sandbox.fstab) and set
# every mount up with one `mount -a`, then the read-only binds of host mount
# points one by one, bring the namespace's own loopback up, and run the tool
# with no capabilities as a child (not exec: pid 1 ignores signals it has no
# handler for, so the tool must not be pid 1 or SIGTERM on cancel would not
# reach it). Its exit status is the tool's. The workspace is bound from "."
# with -c (no canonicalizing): the working directory is the real workspace even
# once a tmpfs covers its path; the tool itself starts in the workspace as the
# mounts left it (`cd` by path: paths relative to the inherited directory would
# bypass the mounts).
_SCRIPT = r"""
mount_bin=$1; ip_bin=$2; mkdir_bin=$3; ws=$4; fstab=$5; stubs=$6; volatile=$7; muted=$8
shift 8
fail() { echo "parkgate sandbox: could not $1" >&2; exit 125; }
"$mount_bin" -t tmpfs -o nosuid,nodev,mode=1777 parkgate-shm /dev/shm || fail "mount /dev/shm"
if [ -n "$stubs" ]; then
  set -f; old_ifs=$IFS; IFS='
'
  for stub in $stubs; do
    "$mkdir_bin" -p -- "${stub%/*}" && : > "$stub" || fail "prepare $stub"
  done
  IFS=$old_ifs; set +f
fi
if [ -n "$fstab" ]; then
  printf '%s' "$fstab" > /dev/shm/.parkgate-fstab || fail "write the mount table"
  "$mount_bin" -a -c -T /dev/shm/.parkgate-fstab || fail "set up the sandbox's mounts"
  : > /dev/shm/.parkgate-fstab
fi
if [ -n "$volatile" ]; then
  printf '%s' "$volatile" > /dev/shm/.parkgate-fstab || fail "write the mount table"
  "$mount_bin" -a -c -T /dev/shm/.parkgate-fstab 2>/dev/null
  : > /dev/shm/.parkgate-fstab
  set -f; old_ifs=$IFS; IFS='
'
  for end in $muted; do
    if [ -S "$end" ] || [ -p "$end" ]; then fail "hide the socket $end"; fi
  done
  IFS=$old_ifs; set +f
fi
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  "$mount_bin" --rbind -o "ro$1" "$2" "$2" || fail "make $2 read-only"
  shift 2
done
shift
if [ "$ws" != - ]; then cd "$ws" || fail "enter the workspace $ws"; fi
if [ "$ip_bin" != - ]; then "$ip_bin" link set lo up 2>/dev/null; fi
"$@"
exit $?
"""


def unshare_argv(unshare: str, *, as_root: bool, isolate_network: bool = False) -> list[str]:
    """The namespace part; a user namespace (mapped root) when not really root."""
    user = [] if as_root else ["--user", "--map-root-user"]
    net = ["--net"] if isolate_network else []
    return [
        unshare, *user, "--mount", "--pid", *net, "--fork", "--kill-child", "--mount-proc",
        "--propagation", "private", "--",
    ]


def _which(name: str) -> str | None:
    path = shutil.which(name, path=_SEARCH_PATH) if os.sep not in name else name
    return path if path is not None and os.access(path, os.X_OK) else None


def _tools(unshare: str) -> tuple[str, str, str, str] | str:
    """(unshare, mount, setpriv, mkdir) as absolute paths, or why they cannot be found."""
    found: list[str] = []
    for name in (unshare, "mount", "setpriv", "mkdir"):
        path = _which(name)
        if path is None:
            return f"{name!r} not found or not executable"
        found.append(path)
    return found[0], found[1], found[2], found[3]


def sandboxed(
    argv: Sequence[str],
    plan: MountPlan | Iterable[str],
    unshare: str = "unshare",
    *,
    isolate_network: bool = False,
    user: ToolUser | None = None,
) -> list[str]:
    """`argv` wrapped to run in the sandbox: `plan` carried out (a plain list of
    paths hides each), a network namespace of its own when `isolate_network`,
    as `user` when given."""
    tools = _tools(unshare)
    if isinstance(tools, str):
        raise FileNotFoundError(tools)
    unshare_path, mount_path, setpriv_path, mkdir_path = tools
    if not isinstance(plan, MountPlan):
        plan = MountPlan(workspace="-", ops=[("hide", os.path.realpath(p)) for p in plan])
    flags = {path: mount_flags(path) for op, path in plan.ops if op in ("ro", "holdro", "keep")}
    fstab = render(plan, flags)
    explicit = [part for path, kept in fstab.explicit
                for part in ("," + kept if kept else "", path)]
    ip_path = (_which("ip") if isolate_network else None) or "-"
    switch = user.setpriv_args() if user is not None else []
    return [
        setpriv_path, *_DIE_WITH_WORKER, "--",
        *unshare_argv(unshare_path, as_root=os.geteuid() == 0, isolate_network=isolate_network),
        "/bin/sh", "-c", _SCRIPT, "parkgate-sandbox", mount_path, ip_path, mkdir_path,
        plan.workspace, fstab.text, "\n".join(fstab.stubs), fstab.volatile,
        "\n".join(fstab.muted), *explicit, "--", setpriv_path,
        *_SETPRIV_DROP, *switch, "--", *argv,
    ]


def as_user(argv: Sequence[str], user: ToolUser | None) -> list[str]:
    """`argv` switched to `user` without a sandbox (tool_sandbox off or unavailable)."""
    if user is None:
        return list(argv)
    setpriv = _which("setpriv")
    if setpriv is None:
        raise ToolExecutionError(
            "tool_user is set but `setpriv` (util-linux) is not installed; the command "
            "was not run."
        )
    return [setpriv, *_SETPRIV_DROP, *user.setpriv_args(), "--", *argv]


@functools.lru_cache(maxsize=16)
def probe(unshare: str = "unshare", *, net: bool = False) -> str | None:
    """None when the sandbox works here (with a network namespace of its own when
    `net`), else why not (cached per binary).

    Runs the real thing once: cover a directory holding a secret file and the
    workspace, keep the workspace writable, mask a service directory but for one
    kept file (as /run and resolv.conf's target) and mute a FIFO, then check
    from inside that the secret, the service and the FIFO are gone, the kept
    file and the workspace are there and no capability is left.
    """
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    with tempfile.TemporaryDirectory(prefix="parkgate-probe-") as tmp:
        holder = Path(tmp) / "root"
        workspace = holder / "ws"
        workspace.mkdir(parents=True)
        (holder / "s").write_text("x")
        service = Path(tmp) / "run"
        (service / "kept").mkdir(parents=True)
        (service / "kept" / "f").write_text("x")
        (service / "sock").write_text("x")
        fifo = Path(tmp) / "fifo"
        os.mkfifo(fifo)
        check = (
            f"! test -e {holder}/s && ! test -e {service}/sock && test -f {service}/kept/f && "
            f"! test -p {fifo} && echo ok > {workspace}/w && "
            "grep -q 'CapEff:[[:space:]]*0*$' /proc/self/status"
        )
        try:
            plan = build_plan(str(workspace), hidden=[str(holder)], services=[str(service)],
                              keep=[str(service / "kept" / "f")], endpoints=[str(fifo)])
            argv = sandboxed(["/bin/sh", "-c", check], plan, unshare, isolate_network=net)
            done = subprocess.run(
                argv, capture_output=True, timeout=10, cwd=workspace,
                env={"PATH": _SEARCH_PATH}, check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        wrote = (workspace / "w").exists()
    if done.returncode != 0 or not wrote:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        what = "unshare --net" if net else unshare
        return f"{what} failed (exit {done.returncode}): {detail[-1] if detail else 'no output'}"
    return None


def unavailable_message(reason: str) -> str:
    """The error a tool call gets under `required` when the sandbox cannot start."""
    return (
        f"The tool sandbox could not be set up on this worker ({reason}); tool_sandbox is "
        "'required', so the command was not run. An operator must fix the sandbox "
        "(see docs/OPERATIONS.md, Security model) or change tool_sandbox."
    )


def network_unavailable_message(reason: str, tool: str) -> str:
    """The error under `required` when the tool's network namespace cannot be set up."""
    return (
        f"The tool sandbox could not give {tool or 'this tool'} a network namespace of its "
        f"own ({reason}); tool_sandbox is 'required', so the command was not run. An "
        "operator must fix the sandbox or opt the tool into the host network "
        "(tool_network_tools / tool_network_classes, docs/OPERATIONS.md)."
    )


_probed: set[tuple[str, bool]] = set()


async def sandbox_reason(unshare: str, *, net: bool = False) -> str | None:
    """Why the sandbox cannot be used (None when it can); the first probe runs in a
    thread so the event loop is not blocked, later ones hit the cache."""
    if (unshare, net) in _probed:
        return probe(unshare, net=net)
    reason = await asyncio.to_thread(functools.partial(probe, unshare, net=net))
    _probed.add((unshare, net))
    return reason


def network_allowed(limits: Limits, tool_name: str, side_effects: str) -> bool:
    """Whether this tool's processes share the host network (opted in by name or class)."""
    return tool_name in limits.tool_network_tools or (
        bool(side_effects) and side_effects.lower() in limits.tool_network_classes
    )


def network_access(limits: Limits, tool_name: str, side_effects: str,
                   reason: str | None, net_reason: str | None) -> str:
    """What network a tool's processes get here, in words (`config check`)."""
    if limits.tool_sandbox == "off":
        return "host network (tool_sandbox: off)"
    if reason is not None:
        if limits.tool_sandbox == "required":
            return "none (sandbox unavailable: processes refused)"
        return "host network (sandbox unavailable)"
    if tool_name in limits.tool_network_tools:
        return "host network (tool_network_tools)"
    if side_effects and side_effects.lower() in limits.tool_network_classes:
        return f"host network (tool_network_classes: {side_effects.lower()})"
    if net_reason is not None:
        if limits.tool_sandbox == "required":
            return "none (no network namespace: processes refused)"
        return "host network (no network namespace here)"
    return "isolated"


def paths_to_hide(limits: Limits, workspace: str) -> list[str]:
    """The paths covered whole for a tool in `workspace` (resolved): the hidden
    paths minus the workspace itself and those that hold it (those are covered
    too, but with the way to the workspace kept)."""
    return build_plan(workspace, hidden=limits.tool_hidden_paths).paths("hide")


def plan_for(limits: Limits, workspace: str, tool_name: str = "") -> MountPlan:
    """The full mount plan of one process of `tool_name` in `workspace`: host
    services' sockets are looked for now (parkgate.sandbox.services)."""
    service_dirs = [p for p in (*SERVICE_DIRS, *limits.tool_service_paths) if os.path.isdir(p)]
    sockets = [p for p in limits.tool_service_paths if p not in service_dirs]
    return build_plan(
        workspace,
        hidden=[*limits.tool_hidden_paths, *log_paths()],
        roots=limits.tool_workspace_roots,
        readonly=limits.tool_readonly_paths,
        protected=installation_paths(),
        services=service_dirs,
        keep=[*exposed_paths(limits.tool_exposed_paths, tool_name),
              *etc_files_under(service_dirs)],
        endpoints=[*sockets, *endpoints()],
    )


def state_line(mode: str, reason: str | None, hidden: int, net_reason: str | None = None) -> str:
    """One line saying what the sandbox does here (start-up log, `config check`)."""
    if mode == "off":
        return ("tool sandbox: off (tools can read the data directory and reach every "
                "service on the host network; see docs/OPERATIONS.md)")
    if reason is None:
        net = ("network isolated unless opted in" if net_reason is None else
               f"network NOT isolated: {net_reason}")
        if net_reason is not None and mode == "required":
            net = (f"NO NETWORK NAMESPACE ({net_reason}): processes of tools not opted in "
                   "to the network will be refused")
        return (f"tool sandbox: on ({hidden} paths hidden from tools, other workspaces "
                f"hidden, parkgate's code read-only; {net})")
    if mode == "required":
        return f"tool sandbox: REQUIRED BUT UNAVAILABLE ({reason}); tool processes will be refused"
    return f"tool sandbox: unavailable ({reason}); tools run unsandboxed (tool_sandbox: auto)"


async def announce(limits: Limits) -> str:
    """Probe at start-up and log the sandbox state once (error under required)."""
    reason = net_reason = None
    if limits.tool_sandbox != "off":
        reason = await sandbox_reason(limits.tool_sandbox_unshare)
        if reason is None:
            net_reason = await sandbox_reason(limits.tool_sandbox_unshare, net=True)
    line = state_line(limits.tool_sandbox, reason, len(limits.tool_hidden_paths), net_reason)
    if limits.tool_sandbox == "required" and (reason or net_reason) is not None:
        log.error("%s", line)
    elif (reason or net_reason) is not None or limits.tool_sandbox == "off":
        # the per-call fallback warning would only repeat this line
        warn_once(f"{'net' if reason is None else 'auto'}:{limits.tool_sandbox_unshare}",
                  "%s", line)
        if limits.tool_sandbox == "off":
            log.warning("%s", line)
    else:
        log.info("%s", line)
    return line


async def tool_command(argv: Sequence[str], context: ToolContext) -> list[str]:
    """`argv` as it must be started for this call: sandboxed, or as is.

    Raises ToolExecutionError (an error result, nothing started) under
    `required` when the sandbox (or the network namespace of a tool not opted
    in) is unavailable, and whenever `tool_user` cannot be used.
    """
    limits = context.limits
    try:
        user = resolve(limits.tool_user)
    except ToolUserError as exc:
        raise ToolExecutionError(f"{exc}; the command was not run.") from None
    if limits.tool_sandbox == "off":
        return as_user(argv, user)
    unshare = limits.tool_sandbox_unshare
    reason = await sandbox_reason(unshare)
    if reason is not None:
        if limits.tool_sandbox == "required":
            raise ToolExecutionError(unavailable_message(reason))
        warn_once(
            f"auto:{unshare}",
            "tool sandbox unavailable (%s): tools run unsandboxed, can read the data "
            "directory and reach every service on the host network; set tool_sandbox: "
            "required to refuse instead",
            reason,
        )
        return as_user(argv, user)
    isolate = not network_allowed(limits, context.tool_name, context.side_effects)
    if isolate:
        net_reason = await sandbox_reason(unshare, net=True)
        if net_reason is not None:
            if limits.tool_sandbox == "required":
                raise ToolExecutionError(network_unavailable_message(net_reason,
                                                                     context.tool_name))
            warn_once(
                f"net:{unshare}",
                "tool sandbox: no network namespace here (%s): tool processes share the "
                "host network, including its loopback services (Temporal, the database)",
                net_reason,
            )
            isolate = False
    plan = await asyncio.to_thread(plan_for, limits, context.workspace_path, context.tool_name)
    return sandboxed(argv, plan, unshare, isolate_network=isolate, user=user)


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
