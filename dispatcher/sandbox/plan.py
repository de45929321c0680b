"""The sandbox's mount plan: what one tool process sees of the filesystem.

Pure path arithmetic (realpath is its only look at the disk); parkgate.sandbox.launch
turns the plan into `op path` pairs that its namespace script carries out in
this order:

0. `keep K` for each opted-in path inside a covered host-service directory,
   then `mask S`: the service directory (`/run`, ...) replaced by a read-only
   copy that holds only the kept paths (read-only binds); a service directory
   with nothing kept is a plain `hide` (step 4);
1. `hold P` for every hidden directory or read-only path that holds the
   workspace, outermost first: a hidden one gets an empty tmpfs in which the
   way down to the workspace is recreated, a read-only one a read-only bind;
2. `ws W`: the workspace itself, bound back writable from the script's
   working directory (which still is the real workspace, whatever now covers
   its path), then `seal P` turns each hold tmpfs read-only;
3. `ro P`: read-only binds (parkgate's code and Python environment,
   `tool_readonly_paths`), outermost first; one that holds the workspace
   (parkgate's own code as a workspace) makes the workspace read-only too;
4. `hide P`: empty read-only tmpfs over each hidden directory (the data
   directories, other workspaces' roots, secret and log directories), then
   /dev/null over each hidden file;
5. `mute E`: /dev/null over each socket or FIFO found in a shared directory
   (parkgate.sandbox.services); one may be gone by the time the namespace is
   set up, so these come last and a failure is checked, not fatal.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

log = logging.getLogger("parkgate.sandbox")

#: Directories a cover would make the host unusable from inside (the tool's own
#: shell and libraries live there): never covered, whatever a setting says.
SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
    "/run", "/sbin", "/sys", "/usr", "/var",
})

_warned: set[str] = set()


def warn_once(key: str, message: str, *args: object) -> None:
    """Log `message` once per process for `key` (plans are built per call)."""
    if key not in _warned:
        _warned.add(key)
        log.warning(message, *args)


def contains(outer: str, inner: str) -> bool:
    """True when `inner` is `outer` or lies under it (both resolved)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


@dataclass
class MountPlan:
    """What to do, in order; `ops` is a list of (op, path)."""

    workspace: str
    ops: list[tuple[str, str]] = field(default_factory=list)

    def args(self) -> list[str]:
        """The plan as the script's `op path` arguments."""
        return [part for op in self.ops for part in op]

    def paths(self, *kinds: str) -> list[str]:
        return [path for op, path in self.ops if op in kinds]


def _unique_real(paths: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for raw in paths:
        path = os.path.realpath(raw)
        if path not in seen:
            seen.append(path)
    return seen


def build_plan(
    workspace: str,
    *,
    hidden: Iterable[str] = (),
    roots: Iterable[str] = (),
    readonly: Iterable[str] = (),
    protected: Iterable[str] = (),
    services: Iterable[str] = (),
    keep: Iterable[str] = (),
    endpoints: Iterable[str] = (),
) -> MountPlan:
    """The plan for a tool in `workspace`.

    hidden: directories/files no tool may see (covered). roots: workspace roots,
    covered like hidden ones except for this workspace. readonly: read-only,
    this workspace kept writable inside them. protected: read-only, and a
    workspace inside one is read-only as well (parkgate's own code).
    services: host services' sockets and the directories holding them, covered
    like hidden ones even when they are system directories (`/run`), never the
    workspace or what lies in it. keep: paths this tool may see after all; a
    service inside one is not covered, one inside a service directory is shown
    read-only in it (a socket on a read-only bind still connects). endpoints:
    sockets and FIFOs found outside the services, muted like them.
    """
    ws = os.path.realpath(workspace)
    holds: list[tuple[str, str]] = []
    covers: list[str] = []
    for path in _unique_real([*hidden, *roots]):
        if path in SYSTEM_DIRS:
            warn_once(f"system:{path}", "sandbox: %s is a system directory; not hidden", path)
        elif path == ws:
            warn_once(f"is-ws:{path}", "sandbox: %s is the workspace itself; not hidden for it",
                      path)
        elif contains(path, ws):
            holds.append(("hold", path))
        else:
            covers.append(path)
    ro: list[str] = []
    for path in _unique_real(readonly):
        if path == "/" or path == ws:
            continue
        if contains(path, ws):
            holds.append(("holdro", path))
        else:
            ro.append(path)
    protect_ws = False
    for path in _unique_real(protected):
        if path == "/":
            continue
        if contains(path, ws):
            protect_ws = True
            warn_once(f"protected:{ws}", "sandbox: workspace %s lies in parkgate's own "
                      "installation %s; tools get it read-only", ws, path)
        ro.append(path)
    masks, keeps, service_hides = _services(ws, services, keep, protected)
    covers += service_hides
    outer = [*masks, *service_hides]
    exposed = _unique_real(keep)
    mutes = [path for path in _unique_real(endpoints)
             if not contains(ws, path) and not any(contains(k, path) for k in exposed)
             and not any(contains(o, path) for o in outer)]
    plan = MountPlan(workspace=ws)
    plan.ops += [("keep", path) for path in keeps]
    plan.ops += [("mask", path) for path in masks]
    holds.sort(key=lambda op: _depth(op[1]))
    plan.ops += holds
    if holds:
        plan.ops.append(("ws", ws))
        plan.ops += [("seal", path) for op, path in holds if op == "hold"]
    plan.ops += [("ro", path) for path in sorted(set(ro), key=_depth)]
    if protect_ws:
        plan.ops.append(("ro", ws))
    plan.ops += [("hide", path) for path in sorted(covers, key=_depth)]
    plan.ops += [("mute", path) for path in mutes]
    return plan


def _services(
    ws: str, services: Iterable[str], keep: Iterable[str], protected: Iterable[str]
) -> tuple[list[str], list[str], list[str]]:
    """(masked service directories, the paths kept in them, services covered whole)."""
    exposed = _unique_real(keep)
    shown = [*exposed, *(p for p in _unique_real(protected) if p != "/")]
    masks: list[str] = []
    keeps: list[str] = []
    hides: list[str] = []
    for path in sorted(_unique_real(services), key=_depth):
        if contains(ws, path) or any(contains(k, path) for k in exposed):
            continue  # the tool's own, or opted in whole
        if path in SYSTEM_DIRS and path != "/run":  # /run holds nothing a shell needs
            warn_once(f"system:{path}", "sandbox: %s is a system directory; not hidden", path)
            continue
        if contains(path, ws):
            warn_once(f"service-ws:{path}", "sandbox: %s holds the workspace %s; host "
                      "services under it are not hidden from its tools", path, ws)
            continue
        if any(contains(outer, path) for outer in (*masks, *hides)):
            continue
        inside = [k for k in shown if contains(path, k) and k != path and "\n" not in k]
        inside = [k for k in inside if not any(contains(o, k) and o != k for o in inside)]
        if inside:
            masks.append(path)
            keeps += sorted(inside, key=_depth)
        else:
            hides.append(path)
    return masks, keeps, hides
