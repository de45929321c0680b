"""Where parkgate keeps its data on this host, and what a sandboxed tool must not see.

`default_data_dir` and `config_file` locate the data directory and the YAML
settings; `HostPaths` (a part of Settings) derives the paths the tool sandbox
hides (parkgate.sandbox.launch), the host services' sockets it hides unless a
tool is opted in, the workspace roots it narrows to one (and a project's roots),
and the link-signing secret's file in the data directory.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING


def default_data_dir() -> Path:
    return Path(os.environ.get("PARKGATE_DATA_DIR") or "~/.parkgate").expanduser()


#: `parkgate workspaces roots add` keeps its roots in this file of the data
#: directory, one absolute path a line: the API reads it at every workspace check,
#: so a root added there takes effect without restarting `serve`.
ADDED_ROOTS_FILE = "workspace-roots"

_added_cache: dict[Path, tuple[tuple[int, int, int], list[Path]]] = {}


def read_added_roots(data_dir: Path) -> list[Path]:
    """The roots `parkgate workspaces roots add` stored under `data_dir` (none when
    the file is absent); re-read only when the file changed."""
    path = Path(data_dir).expanduser() / ADDED_ROOTS_FILE
    try:
        stat = path.stat()
    except OSError:
        return []
    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    cached = _added_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return list(cached[1])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    roots = [Path(line.strip()) for line in lines
             if line.strip().startswith("/") and "\x00" not in line]
    _added_cache[path] = (stamp, roots)
    return list(roots)


def write_added_roots(data_dir: Path, roots: list[Path]) -> None:
    """Replace the stored roots (atomically: a reader sees the old or the new list)."""
    path = Path(data_dir).expanduser() / ADDED_ROOTS_FILE
    temp = path.with_name(f".{ADDED_ROOTS_FILE}.{os.getpid()}")
    temp.write_text("".join(f"{root}\n" for root in roots), encoding="utf-8")
    os.replace(temp, path)


def config_file() -> Path | None:
    """The YAML settings file in use (PARKGATE_CONFIG, else <data_dir>/server.yaml if present)."""
    explicit = os.environ.get("PARKGATE_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    candidate = default_data_dir() / "server.yaml"
    return candidate if candidate.exists() else None


class HostPaths:
    """Part of Settings: the host paths its fields imply."""

    # Settings' fields this part reads.
    if TYPE_CHECKING:
        data_dir: Path
        link_secret: str | None
        database_url: str
        temporal_tls_key_path: Path | None
        tool_hidden_paths: list[Path]
        tool_service_paths: list[Path]
        workspace_roots: list[Path]
        project_workspace_roots: dict[str, list[Path]]
        worker_groups: dict[str, list[Path]]

    def hidden_tool_paths(self) -> list[Path]:
        """What a sandboxed tool must not see (parkgate.sandbox.launch): the data
        directory, each configured secret file and the directory holding it,
        then `tool_hidden_paths`. A directory that holds a call's workspace is
        dropped for that call (parkgate.sandbox.launch.paths_to_hide); the file itself
        stays covered."""
        paths: list[Path] = self.data_dirs()
        files: list[Path] = []
        if self.temporal_tls_key_path:
            files.append(Path(self.temporal_tls_key_path).expanduser())
        config = config_file()
        if config is not None:
            files.append(config)
        url = self.database_url
        if url.startswith("sqlite") and ":///" in url:
            db = url.split(":///", 1)[1].split("?", 1)[0]
            if db and db != ":memory:":
                files.append(Path(db))
        for file in files:
            paths += [file, file.parent]
        paths += [Path(p).expanduser() for p in self.tool_hidden_paths]
        unique: list[Path] = []
        for path in paths:
            resolved = path.resolve()
            if resolved not in unique:
                unique.append(resolved)
        return unique

    def data_dirs(self) -> list[Path]:
        """Every parkgate data directory this host is known to have: the configured
        one, PARKGATE_DATA_DIR's, and `~/.parkgate*` of the worker's user (another
        `serve` with its own link secret is as secret as ours)."""
        found = [Path(self.data_dir).expanduser(), default_data_dir()]
        home = Path("~").expanduser()
        if home.is_dir():
            try:
                found += sorted(p for p in home.glob(".parkgate*") if p.is_dir())
            except OSError:
                pass
        else:
            found.append(home / ".parkgate")
        return found

    def service_tool_paths(self) -> list[Path]:
        """Host services' paths hidden from sandboxed tools unless opted in
        (`tool_exposed_paths`), besides those parkgate.sandbox.services always
        covers or finds: the history database's unix socket, then
        `tool_service_paths`."""
        paths = [*self._database_socket_paths(), *self.tool_service_paths]
        unique: list[Path] = []
        for path in paths:
            resolved = Path(path).expanduser().resolve()
            if resolved not in unique:
                unique.append(resolved)
        return unique

    def _database_socket_paths(self) -> list[Path]:
        """The unix socket of a local PostgreSQL history database: its directory,
        or the socket file itself in a shared directory like /tmp (covering /tmp
        would take it from every tool). A socket is reachable by path from any
        network namespace."""
        url = self.database_url
        if not url.startswith("postgres"):
            return []
        from urllib.parse import parse_qs, unquote, urlsplit

        parts = urlsplit(url)
        query = parse_qs(parts.query)
        host = query.get("host", [""])[0] or unquote(parts.netloc.rpartition("@")[2])
        if not host.startswith("/"):
            host = parts.hostname or ""
        if host.startswith("/"):
            dirs = [host.split(":", 1)[0]]
        elif host in ("", "localhost", "127.0.0.1", "::1"):
            # where libpq and asyncpg look when no host is given
            dirs = ["/run/postgresql", "/var/run/postgresql", "/tmp"]
        else:
            return []
        try:
            port = int(query.get("port", [""])[0] or parts.port or 5432)
        except ValueError:
            port = 5432
        found: list[Path] = []
        for directory in dirs:
            path = Path(directory)
            try:
                mode = path.stat().st_mode
            except OSError:
                mode = 0
            shared = mode & 0o1002 == 0o1002  # sticky and world-writable: /tmp
            found.append(path / f".s.PGSQL.{port}" if shared else path)
        return found

    def tool_workspace_roots(self) -> list[Path]:
        """Where sessions' workspaces may live (workspace_roots, every project's own
        roots and the worker groups' roots): a sandboxed tool sees none of them but
        its own workspace."""
        roots = [*self.workspace_roots, *self.added_workspace_roots()]
        for project_roots in self.project_workspace_roots.values():
            roots += project_roots
        for group_roots in self.worker_groups.values():
            roots += group_roots
        return roots

    def added_workspace_roots(self) -> list[Path]:
        """Roots added with `parkgate workspaces roots add` (read_added_roots)."""
        return read_added_roots(self.data_dir)

    def workspace_roots_for(self, project: str) -> list[Path]:
        """Where `project`'s sessions may have their workspace: its own roots, else
        `workspace_roots` and the roots added with `parkgate workspaces roots add`."""
        own = self.project_workspace_roots.get(project)
        if own is not None:
            return own
        return [*self.workspace_roots, *self.added_workspace_roots()]

    def workspace_roots_setting(self, project: str) -> str:
        """The setting that holds `project`'s roots, for messages saying what to change."""
        if project in self.project_workspace_roots:
            return f"project_workspace_roots.{project}"
        return "workspace_roots"

    def signing_secret(self) -> str:
        """The link-signing secret; created once under data_dir when unset."""
        if self.link_secret:
            return self.link_secret
        path = self.data_dir / "link-secret"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(48)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secret)
        return secret
