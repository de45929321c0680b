"""Host services a tool could reach through the file system, found per call.

A network namespace stops TCP and abstract unix sockets, not a unix socket
reached by its path: `psql -h /run/postgresql`, `/run/docker.sock` or the D-Bus
system bus work from any namespace that sees the file. So the sandbox covers
the directories where services keep their sockets (`SERVICE_DIRS`, the
history database's socket directory, `tool_service_paths`) and replaces every
socket or FIFO found in the shared places below (`SCAN_ROOTS`) by /dev/null,
unless the tool is opted in (`tool_exposed_paths`). Regular files that /etc
links to inside a covered directory (`/etc/resolv.conf` ->
`/run/systemd/resolve/stub-resolv.conf`) stay visible, read-only, so names
still resolve.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping

from parkgate.sandbox.plan import contains

#: Directories of host services' sockets, covered whole (/var/run is /run on most hosts).
SERVICE_DIRS = ("/run", "/var/run")
#: Shared directories scanned for sockets and FIFOs per call, with how deep:
#: /tmp/.s.PGSQL.5432, /tmp/.X11-unix/X0, /tmp/tmux-0/default, /var/lib/mysql/mysql.sock,
#: /var/spool/postfix/public/cleanup, /dev/log.
SCAN_ROOTS = (("/tmp", 2), ("/var/tmp", 2), ("/var/lib", 2), ("/var/spool", 3), ("/dev", 1))


def _scan(root: str, depth: int, found: list[str]) -> None:
    try:
        entries = os.scandir(root)
    except OSError:
        return
    with entries:
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if depth > 1:
                        _scan(entry.path, depth - 1, found)
                    continue
                if entry.is_file(follow_symlinks=False):
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                found.append(entry.path)


def endpoints(roots: Iterable[tuple[str, int]] = SCAN_ROOTS) -> list[str]:
    """The sockets and FIFOs in `roots` (each to its depth) as they are now: a
    service started after a call's sandbox was set up is not among them."""
    found: list[str] = []
    for root, depth in roots:
        _scan(root, depth, found)
    return found


def etc_files_under(dirs: Iterable[str], etc: str = "/etc") -> list[str]:
    """Regular files that the symlinks directly in `etc` resolve to inside `dirs`
    (resolv.conf under systemd-resolved, resolvconf or NetworkManager)."""
    covered = [os.path.realpath(d) for d in dirs]
    found: list[str] = []
    try:
        entries = list(os.scandir(etc))
    except OSError:
        return found
    for entry in entries:
        if not entry.is_symlink():
            continue
        target = os.path.realpath(entry.path)
        if (any(contains(d, target) and d != target for d in covered)
                and os.path.isfile(target) and target not in found):
            found.append(target)
    return found


def exposed_paths(exposed: Mapping[str, Iterable[str]], tool_name: str) -> list[str]:
    """The host service paths `tool_name`'s processes are opted in to see."""
    return list(exposed.get(tool_name, ()))
