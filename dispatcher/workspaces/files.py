"""WorkspaceFileAPI: every file access of a tool, confined to the session's root.

Paths are resolved (``..`` and symlinks, file or any parent directory) before
they are checked, so ``subdir/../../etc/passwd`` and a link pointing outside
are both rejected with WorkspaceEscapeError (error class permission_denied).

Hard links cannot be resolved: a second name of a file outside the workspace
looks like any workspace file. Writes (write, append, patch) refuse a regular
file with more than one link (st_nlink > 1), so a planted link cannot make a
tool change a file elsewhere. Reads follow the path rule only and do read a
hard-linked file: creating the link already required read access to it, and
package managers (pnpm, `git clone --local`) fill workspaces with hard links.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from parkgate.errors import ToolExecutionError, WorkspaceEscapeError


def resolve_root(workspace_path: str) -> str:
    """The workspace root as an absolute real path (``~`` expanded)."""
    return os.path.realpath(os.path.expanduser(workspace_path))


_IS_A_DIRECTORY = "Is a directory, not a file"


def _refusal(
    exc: OSError, path: str, verb: tuple[str, str], *kinds: tuple[type[OSError], str]
) -> ToolExecutionError:
    """A file access the OS refused, in one wording for reads, listings and
    writes: the message of the first of `kinds` it is, else permission denied,
    else the OS's reason (`verb`: the access and its -ing form)."""
    for kind, message in kinds:
        if isinstance(exc, kind):
            return ToolExecutionError(f"{message}: {path}")
    if isinstance(exc, PermissionError):
        return ToolExecutionError(f"Permission denied {verb[1]} {path}")
    return ToolExecutionError(f"Cannot {verb[0]} {path}: {exc.strerror}")


def _under(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


class WorkspaceFileAPI:
    """File operations scoped to one workspace root.

    `off_limits`: resolved paths no tool may read or write even inside the
    workspace (parkgate's data directories, secret files and logs: a workspace
    may hold them, `~` holds `~/.parkgate`); `read_only`: paths no tool may
    write (parkgate's own code and Python environment). The tool sandbox hides
    the same paths from tool processes (parkgate.sandbox.launch).
    """

    def __init__(
        self, workspace_root: str, *, off_limits: Iterable[str] = (),
        read_only: Iterable[str] = (),
    ) -> None:
        self.workspace_root = resolve_root(workspace_root)
        # A directory holding the workspace (a secret file's directory that is ~)
        # would forbid the workspace itself: the root rule confines tools below it.
        self.off_limits = tuple(
            real for real in (os.path.realpath(p) for p in off_limits)
            if not _under(real, self.workspace_root)
        )
        self.read_only = tuple(os.path.realpath(p) for p in read_only)

    # ------------------------------------------------------------------ paths
    def resolve(self, path: str) -> Path:
        """The real absolute path of ``path``; raises WorkspaceEscapeError if outside."""
        if not isinstance(path, str):
            raise WorkspaceEscapeError(f"Path must be a string, got {type(path).__name__}")
        if "\x00" in path:
            raise WorkspaceEscapeError("Path contains a NUL byte")
        if path == "":
            raise WorkspaceEscapeError("Path is empty")
        candidate = path if os.path.isabs(path) else os.path.join(self.workspace_root, path)
        try:
            real = os.path.realpath(candidate)
        except (OSError, ValueError) as exc:  # symlink loops on some platforms
            raise WorkspaceEscapeError(f"Path '{path}' cannot be resolved: {exc}") from None
        root = self.workspace_root
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise WorkspaceEscapeError(f"Path '{path}' escapes workspace boundary")
        if any(_under(hidden, real) for hidden in self.off_limits):
            raise WorkspaceEscapeError(
                f"Path '{path}' is parkgate's own (data, secrets or logs): off limits to tools"
            )
        return Path(real)

    def check_writable(self, path: str) -> Path:
        """The resolved path, refused (WorkspaceEscapeError) if tools may not write it."""
        real = self.resolve(path)
        if any(_under(ro, str(real)) for ro in self.read_only):
            raise WorkspaceEscapeError(
                f"Path '{path}' is parkgate's own code or Python environment: read-only to tools"
            )
        return real

    def relative(self, path: str) -> str:
        """``path`` as a normalized workspace-relative path ("." for the root)."""
        real = self.resolve(path)
        rel = os.path.relpath(real, self.workspace_root)
        return rel

    def check(self, path: str) -> None:
        """Raise WorkspaceEscapeError if ``path`` is outside the workspace."""
        self.resolve(path)

    # ------------------------------------------------------------------ reads
    def read_bytes(self, path: str) -> bytes:
        target = self.resolve(path)
        try:
            return target.read_bytes()
        except OSError as exc:
            raise _refusal(exc, path, ("read", "reading"), (FileNotFoundError, "File not found"),
                           (IsADirectoryError, _IS_A_DIRECTORY)) from None

    def read(self, path: str) -> str:
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolExecutionError(f"File is not UTF-8 text: {path}") from None

    def exists(self, path: str) -> bool:
        return self.resolve(path).exists()

    def is_dir(self, path: str) -> bool:
        return self.resolve(path).is_dir()

    def list(self, path: str = ".") -> list[str]:
        """Sorted entry names of a directory; directories end with '/'."""
        target = self.resolve(path)
        try:
            entries = sorted(os.scandir(target), key=lambda e: e.name)
        except OSError as exc:
            raise _refusal(exc, path, ("list", "listing"),
                           (FileNotFoundError, "Directory not found"),
                           (NotADirectoryError, "Not a directory")) from None
        return [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries]

    # ----------------------------------------------------------------- writes
    def _open_for_write(self, path: str, flags: int) -> tuple[Path, int]:
        target = self.check_writable(path)
        if str(target) == self.workspace_root:
            raise ToolExecutionError(f"Cannot write to the workspace root: {path}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ToolExecutionError(
                f"Cannot create the parent directory of {path}: {exc.strerror}"
            ) from None
        # Re-check after creating parents, and never follow a final symlink.
        self.resolve(path)
        truncate = bool(flags & os.O_TRUNC)
        try:
            # Truncate only after the link-count check below.
            fd = os.open(target, (flags & ~os.O_TRUNC) | os.O_NOFOLLOW, 0o644)
        except OSError as exc:  # ELOOP (final symlink), ENOTDIR, ...
            raise _refusal(exc, path, ("write", "writing"),
                           (IsADirectoryError, _IS_A_DIRECTORY)) from None
        info = os.fstat(fd)
        if info.st_nlink > 1:
            os.close(fd)
            raise WorkspaceEscapeError(
                f"Refusing to write {path}: it has {info.st_nlink} hard links, so it may be "
                "a file outside the workspace"
            )
        if truncate:
            os.ftruncate(fd, 0)
        return target, fd

    def write_bytes(self, path: str, content: bytes) -> None:
        _, fd = self._open_for_write(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)

    def write(self, path: str, content: str) -> None:
        self.write_bytes(path, content.encode("utf-8"))

    def append(self, path: str, content: str) -> None:
        _, fd = self._open_for_write(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8"))

    def delete(self, path: str) -> None:
        target = self.check_writable(path)
        if str(target) == self.workspace_root:
            raise ToolExecutionError("Cannot delete the workspace root")
        try:
            if target.is_dir() and not target.is_symlink():
                target.rmdir()
            else:
                target.unlink()
        except FileNotFoundError:
            raise ToolExecutionError(f"File not found: {path}") from None
        except OSError as exc:
            raise ToolExecutionError(f"Cannot delete {path}: {exc.strerror}") from None

    def patch(self, path: str, old: str, new: str) -> None:
        """Replace the unique occurrence of ``old`` with ``new`` (str_replace style)."""
        text = self.read(path)
        self.write(path, apply_patch(text, old, new, path))


def apply_patch(text: str, old: str, new: str, path: str) -> str:
    """``text`` with the single occurrence of ``old`` replaced; clear error otherwise."""
    if old == "":
        raise ToolExecutionError(f"Patch for {path}: the string to replace is empty")
    count = text.count(old)
    if count == 0:
        raise ToolExecutionError(f"Patch for {path}: the string to replace was not found")
    if count > 1:
        raise ToolExecutionError(
            f"Patch for {path}: the string to replace occurs {count} times; "
            "include more context so it is unique"
        )
    return text.replace(old, new, 1)
