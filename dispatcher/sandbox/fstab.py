"""A mount plan as one fstab for `mount -a`: one `mount` process sets up every
cover and read-only bind (one process per mount cost ~2-4 ms each).

`mount -a` skips an entry it believes is mounted already: every tmpfs gets a
source name of its own, a workspace is bound from "." (the script's working
directory), and a read-only bind of a path that is a mount point on the host
(where `mount -a` could mistake the bind for the mount itself) is left out of
the table and done by an explicit `mount` afterwards (`explicit`). Entries
whose target will not exist in the namespace (under a cover, or not on the
host) are left out: `mount` would fail on them, and they are hidden anyway.

A masked service directory (`/run`) is assembled in a staging directory of the
namespace's private /dev/shm while the host's paths are still in sight: each
kept path is bound read-only to its place there (a kept file onto an empty
file the script creates first, `stubs`), the staging directory is bound
read-only over the service directory, and an empty tmpfs then covers the
staging directory itself.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field

from parkgate.sandbox.plan import MountPlan, contains

_HOLD = "nosuid,nodev,noexec,size=64k,mode=0755,X-mount.mkdir=0755"
_HIDE = "ro,nosuid,nodev,noexec,size=4k,mode=0555"
_SEAL = "remount,bind,ro,nosuid,nodev,noexec"


@dataclass
class Fstab:
    """The table's text plus the read-only binds done one by one after it."""

    text: str = ""
    #: (path, per-mount flags to keep) for `mount --rbind -o ro,<flags> path path`.
    explicit: list[tuple[str, str]] = field(default_factory=list)
    #: Empty files the script creates (with their directories) before `mount -a`.
    stubs: list[str] = field(default_factory=list)
    #: A second table for sockets that may vanish meanwhile (`mute`): its failures
    #: are not fatal, but none of `muted` may be a socket or FIFO afterwards.
    volatile: str = ""
    muted: list[str] = field(default_factory=list)

#: Where a masked directory is assembled (the namespace's own /dev/shm).
STAGING = "/dev/shm/.parkgate-mask-"


def _escape(path: str) -> str:
    return (path.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011")
            .replace("\n", "\\012"))


def _line(source: str, target: str, fstype: str, options: str) -> str:
    return f"{_escape(source)} {_escape(target)} {fstype} {options} 0 0\n"


def render(plan: MountPlan, flags_of: dict[str, str]) -> Fstab:
    """The fstab of `plan`; `flags_of[path]` gives the kept flags of a read-only
    path's host mount ("nosuid,nodev", ... or "")."""
    ws = plan.workspace
    tag = f"parkgate-{secrets.token_hex(4)}"
    holds = [path for op, path in plan.ops if op in ("hold", "holdro")]
    held = [path for op, path in plan.ops if op == "hold"]
    covered: list[str] = []
    masks = plan.paths("mask")
    kept = [path for op, path in plan.ops if op == "keep" and os.path.lexists(path)]

    def visible(path: str) -> bool:
        """Whether `path` exists inside the namespace when its entry comes up."""
        if not os.path.lexists(path):
            return False
        if any(contains(c, path) and c != path for c in covered):
            return False
        if any(contains(m, path) and m != path for m in masks) and not any(
                contains(k, path) or contains(path, k) for k in kept):
            return False
        on_way = ws != "-" and (contains(path, ws) or contains(ws, path))
        return on_way or not any(contains(h, path) and h != path for h in held)

    out = Fstab()
    lines: list[str] = []
    for op, path in plan.ops:
        flags = flags_of.get(path, "")
        ro = "ro" + (f",{flags}" if flags else "")
        if op == "keep":
            if path not in kept:
                continue
            mask = next(m for m in masks if contains(m, path))
            staged = STAGING + str(masks.index(mask)) + path[len(mask.rstrip("/")):]
            if os.path.isdir(path):
                lines.append(_line(path, staged, "none", f"rbind,{ro},X-mount.mkdir=0755"))
            else:
                out.stubs.append(staged)
                lines.append(_line(path, staged, "none", f"bind,{ro}"))
        elif op == "mask":
            staging = STAGING + str(masks.index(path))
            if not os.path.lexists(path):
                continue
            if not any(contains(path, k) for k in kept):
                lines.append(_line(tag, path, "tmpfs", _HIDE))
            else:
                lines.append(_line(staging, path, "none", "rbind,ro,nosuid,nodev,noexec"))
                lines.append(_line(tag, staging, "tmpfs", _HIDE))
        elif op == "hold":
            lines.append(_line(tag, path, "tmpfs", _HOLD))
        elif op == "holdro":
            if any(contains(h, path) and h != path for h in held):
                continue  # an outer cover already hides what it would show
            lines.append(_line(path, path, "none", f"rbind,{ro}"))
        elif op == "ws":
            lines.append(_line(".", path, "none", "rbind,X-mount.mkdir=0755"))
        elif op == "seal":
            lines.append(_line("none", path, "none", _SEAL))
        elif op == "ro":
            if not visible(path):
                continue
            if os.path.ismount(path) and path not in holds:
                out.explicit.append((path, flags))
            else:
                lines.append(_line(path, path, "none", f"rbind,{ro}"))
        elif op == "hide":
            if not visible(path):
                continue
            covered.append(path)
            if os.path.isdir(path):
                lines.append(_line(tag, path, "tmpfs", _HIDE))
            else:
                lines.append(_line("/dev/null", path, "none", "bind"))
        elif op == "mute":
            if visible(path) and "\n" not in path:
                out.muted.append(path)
                out.volatile += _line("/dev/null", path, "none", "bind")
        else:
            raise ValueError(f"unknown mount op {op!r}")
    out.text = "".join(lines)
    return out
