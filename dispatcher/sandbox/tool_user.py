"""The OS user tool processes run as: a dedicated one (`tool_user`), or the worker's.

The sandbox hides parkgate's data and makes its code read-only, but a tool
running as the worker's user keeps that user's rights on the rest of the host:
as root, every file root owns (/etc, /root's dotfiles, cron, systemd units).
With `tool_user` set, the worker (which must then run as root) starts each tool
process under `setpriv --reuid --regid` as that user, so the kernel's own
permission checks keep the tool out of what the user does not own.
"""

from __future__ import annotations

import functools
import grp
import os
import pwd
from dataclasses import dataclass


class ToolUserError(ValueError):
    """`tool_user` names no user, or the worker cannot switch to it."""


@dataclass(frozen=True)
class ToolUser:
    """A resolved tool user: what setpriv switches to."""

    uid: int
    gid: int
    #: The passwd name, when there is one (then its supplementary groups apply).
    name: str | None

    def setpriv_args(self) -> list[str]:
        """setpriv options that switch to this user (real and effective ids)."""
        groups = "--init-groups" if self.name else "--clear-groups"
        return [f"--reuid={self.uid}", f"--regid={self.gid}", groups]

    def describe(self) -> str:
        return f"{self.name or 'uid'} ({self.uid}:{self.gid})"


def _user(text: str) -> tuple[int, int | None, str | None]:
    """(uid, passwd gid or None, passwd name or None) of a name or a number."""
    try:
        entry = pwd.getpwuid(int(text)) if text.isdigit() else pwd.getpwnam(text)
    except KeyError:
        if text.isdigit():
            return int(text), None, None
        raise ToolUserError(f"tool_user: no user named {text!r} on this host") from None
    return entry.pw_uid, entry.pw_gid, entry.pw_name


def _group(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise ToolUserError(f"tool_user: no group named {text!r} on this host") from None


@functools.lru_cache(maxsize=8)
def parse(spec: str) -> ToolUser:
    """`name`, `uid`, `name:group` or `uid:gid` as a ToolUser (ToolUserError if unknown)."""
    user_text, _, group_text = spec.strip().partition(":")
    if not user_text:
        raise ToolUserError(f"tool_user: {spec!r} names no user")
    uid, gid, name = _user(user_text)
    if group_text:
        gid = _group(group_text)
    if gid is None:
        raise ToolUserError(
            f"tool_user: uid {uid} has no passwd entry; give its group too (`{uid}:GID`)"
        )
    if uid == 0:
        raise ToolUserError("tool_user: must not be root (uid 0); name a dedicated user")
    return ToolUser(uid=uid, gid=gid, name=name)


def resolve(spec: str | None) -> ToolUser | None:
    """The user to switch tool processes to; None when they run as the worker's own.

    Raises ToolUserError when the user is unknown or the worker, not being root,
    cannot switch to it (nothing may run then: the operator asked for isolation).
    """
    if not spec:
        return None
    user = parse(spec)
    if user.uid == os.geteuid() and user.gid == os.getegid():
        return None
    if os.geteuid() != 0:
        raise ToolUserError(
            f"tool_user {spec!r}: the worker runs as uid {os.geteuid()}, not root, so it "
            "cannot start tools as another user; run the worker as root or unset tool_user"
        )
    return user


def root_warning(spec: str | None) -> str | None:
    """The loud start-up warning for tools that would run as root; None when they do not."""
    if os.geteuid() != 0 or spec:
        return None
    return (
        "parkgate runs tools as ROOT: an approved shell command can write any file root "
        "owns outside parkgate's own paths (/etc, /root, cron, systemd units). Create a "
        "dedicated user and set tool_user (docs/OPERATIONS.md, 'A dedicated tool user')."
    )


def line(spec: str | None) -> str:
    """One line for `config check` and the start-up log: who tool processes run as."""
    if not spec:
        if os.geteuid() == 0:
            return "tool user: root (the worker's user; set tool_user to a dedicated user)"
        return f"tool user: the worker's user (uid {os.geteuid()})"
    try:
        user = resolve(spec)
    except ToolUserError as exc:
        return f"tool user: UNUSABLE ({exc}); tool processes will be refused"
    if user is None:
        return f"tool user: {spec} (the worker's own user)"
    return f"tool user: {user.describe()}"
