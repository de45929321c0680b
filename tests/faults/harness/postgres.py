"""A private PostgreSQL instance: initdb into a temp dir, a free port on
127.0.0.1, start/stop on demand (for outages), always torn down.

PostgreSQL refuses to run as root, so when the tests run as root the data
directory is owned by, and the server runs as, the `postgres` system user.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.faults.harness.ports import free_port, wait_port
from tests.faults.harness.procs import run


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bindir() -> Path:
    """Directory holding initdb/pg_ctl/postgres (pg_config, then Debian layout, then PATH)."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(os.path.realpath(initdb)).parent)
    for cand in candidates:
        if all((cand / exe).exists() for exe in ("initdb", "pg_ctl", "postgres")):
            return cand
    raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found")


class PrivatePostgres:
    """One throwaway cluster with one database, owned by this test run."""

    def __init__(self, database: str = "parkgate") -> None:
        self.bindir = find_bindir()
        self.database = database
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            try:
                pwd.getpwnam(self.user)
            except KeyError as exc:
                raise PostgresUnavailable("running as root and no `postgres` user") from exc
        self.root = Path(tempfile.mkdtemp(prefix="parkgate-pg-"))
        self.datadir = self.root / "data"
        self.sockdir = self.root / "sock"
        self.logfile = self.root / "server.log"
        self.started = False
        self.outages = 0

    # ------------------------------------------------------------------
    @property
    def url(self) -> str:
        """SQLAlchemy async URL (asyncpg) for the private database."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        res = run(
            [str(self.bindir / argv[0]), *argv[1:]],
            timeout=timeout,
            user=self.user,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
            cwd=self.root,
        )
        if res.returncode != 0:
            raise RuntimeError(
                f"{argv[0]} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}"
                f"\n{self.log_tail()}"
            )
        return res

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # ------------------------------------------------------------------
    def init(self) -> PrivatePostgres:
        """initdb (trust auth, user postgres), start, create the database."""
        self.sockdir.mkdir()
        if self.user:
            ent = pwd.getpwnam(self.user)
            for path in (self.root, self.sockdir):
                os.chown(path, ent.pw_uid, ent.pw_gid)
        self._run(
            "initdb", "-D", str(self.datadir), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-sync", timeout=120,
        )
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  self.database)
        return self

    def start(self) -> None:
        """Start (or restart after an outage) on the same port and data dir.

        fsync is off (nothing survives a machine crash, and none is simulated),
        but commits are synchronous: a commit is written to the OS before it is
        acknowledged, so the crash-stop of an outage never loses an acknowledged
        commit, however long a loaded machine leaves the WAL writer waiting.
        """
        opts = (
            f"-p {self.port} -k {self.sockdir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=on -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.datadir), "-l", str(self.logfile), "-o", opts,
                  "-w", "-t", "60", "start", timeout=90)
        wait_port(self.port, 30)
        self.started = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (an outage when followed later by start())."""
        if not self.started:
            return
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "-t", "60", "stop",
                  timeout=90)
        self.started = False

    async def outage(self, seconds: float) -> None:
        """Stop the database for `seconds`, then bring it back (same port, same data)."""
        await asyncio.to_thread(self.stop, "immediate")
        self.outages += 1
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.start)

    def destroy(self) -> None:
        """Stop (immediately) and delete the cluster."""
        try:
            if self.datadir.exists() and (self.datadir / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.datadir), "-m", "immediate", "-w", "stop",
                          timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        self.started = False
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        try:
            return self.init()
        except BaseException:
            self.destroy()
            raise

    def __exit__(self, *exc: object) -> None:
        self.destroy()
