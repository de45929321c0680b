"""Host services a sandboxed tool reaches through the file system (issue 36):
unix sockets under /run, /var/run, the database's socket directory and the
shared directories are out of sight unless the tool is opted in
(`tool_exposed_paths`); what /etc links to under /run stays readable. Every
call here is a real sandboxed process; the database is the real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from parkgate import ConfirmationPolicy, Limits, Session, ToolDispatcher, ToolUseBlock
from parkgate.cli.config import load_registry, network_table, settings_table
from parkgate.sandbox.launch import sandboxed
from parkgate.sandbox.plan import build_plan
from parkgate.sandbox.services import endpoints, etc_files_under
from parkgate.settings import Settings
from parkgate.tools import builtin_tools, composed_tools
from tests.fixtures.db import PG_ADMIN_URL, postgres_unavailable
from tests.fixtures.required import needs_net_sandbox, needs_root, unavailable

needs_sandbox = needs_net_sandbox

CONNECT = (
    "import socket, sys\n"
    "for path in sys.argv[1:]:\n"
    "    s = socket.socket(socket.AF_UNIX)\n"
    "    try:\n"
    "        s.connect(path); print('connected', path)\n"
    "    except OSError as exc:\n"
    "        print('refused', path, type(exc).__name__)\n"
)


async def approved_shell(command: str, workspace: Path, **limits: Any) -> str:
    """`command` as a model's shell call that a human approves; its output."""
    policy = ConfirmationPolicy.from_mapping({"per_tool": {"shell": "prompt"}})
    dispatcher = ToolDispatcher(policy, tools=[*builtin_tools(), *composed_tools()],
                                limits=Limits(**limits))
    requests: asyncio.Queue[str] = asyncio.Queue()
    dispatcher.on_event(lambda e: e.type == "tool.confirmation_requested"
                        and e.request_id and requests.put_nowait(e.request_id))
    call = asyncio.ensure_future(dispatcher.dispatch(
        ToolUseBlock(id="hostile", name="shell", input={"command": command}),
        Session(session_id="s", turn_id="t", workspace_path=str(workspace)),
    ))
    request_id = await asyncio.wait_for(requests.get(), 10)
    await dispatcher.resolve_confirmation(request_id, "allow")
    result = await asyncio.wait_for(call, 60)
    return result.text


@pytest.fixture
def pg_socket() -> tuple[str, int]:
    """(the directory of the real PostgreSQL server's unix socket, its port), as
    the server reports them."""
    async def ask() -> tuple[str, int]:
        conn = await asyncpg.connect(PG_ADMIN_URL.replace("+asyncpg", ""), timeout=10)
        try:
            dirs = await conn.fetchval("SHOW unix_socket_directories")
            port = int(await conn.fetchval("SHOW port"))
        finally:
            await conn.close()
        return str(dirs), port

    try:
        dirs, port = asyncio.run(ask())
    except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
        postgres_unavailable(f"{type(exc).__name__}: {exc}")
        raise
    for directory in (d.strip() for d in dirs.split(",")):
        if directory and Path(directory, f".s.PGSQL.{port}").exists():
            return directory, port
    unavailable(f"the PostgreSQL server has no unix socket here ({dirs!r})")


@needs_sandbox
async def test_an_approved_shell_call_cannot_reach_the_database_socket_unless_opted_in(
    pg_socket: tuple[str, int], workspace: Path
) -> None:
    directory, port = pg_socket
    if shutil.which("psql"):
        command = f"psql -h {directory} -p {port} -U postgres -Atc 'select 40 + 2'"
        reached = "42"
    else:
        (workspace / "connect.py").write_text(CONNECT)
        command = f"{sys.executable} connect.py {directory}/.s.PGSQL.{port}"
        reached = "connected"
    # plain Limits: no database_url says where the socket is; /run etc. are covered anyway
    out = await approved_shell(command, workspace)
    assert reached not in out.split("--- stderr ---")[0], out
    # opted in, the same approved call gets in: the test can fail
    out = await approved_shell(command, workspace, tool_exposed_paths={"shell": (directory,)})
    assert reached in out, out
    # another tool's opt-in does not count
    out = await approved_shell(command, workspace,
                               tool_exposed_paths={"read_file": (directory,)})
    assert reached not in out.split("--- stderr ---")[0], out


@pytest.fixture
def sock_tmp() -> Iterator[Path]:
    """A short temporary directory for unix sockets: a socket's path must fit
    108 bytes, which pytest's tmp_path under a long base does not leave room for."""
    directory = Path(tempfile.mkdtemp(prefix="pgs-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _listen(path: str) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(4)
    return server


@pytest.fixture
def host_sockets() -> Iterator[dict[str, str]]:
    """A docker.sock-like socket in a directory of its own under /run, a
    `.s.PGSQL.*`-like socket directly in /tmp and an abstract socket, listening."""
    tag = f"parkgate-test-{os.getpid()}-{secrets.token_hex(3)}"
    run_dir = Path("/run") / tag
    try:
        run_dir.mkdir()
    except OSError as exc:
        unavailable(f"cannot create a socket under /run here: {exc}")
    paths = {"run": str(run_dir / "docker.sock"), "tmp": f"/tmp/.s.PGSQL.{tag}",
             "abstract": "@" + tag}
    servers = [_listen(paths["run"]), _listen(paths["tmp"]), _listen("\0" + tag)]
    try:
        yield paths
    finally:
        for server in servers:
            server.close()
        Path(paths["tmp"]).unlink(missing_ok=True)
        shutil.rmtree(run_dir, ignore_errors=True)


@needs_sandbox
async def test_sockets_under_run_and_in_tmp_are_hidden_unless_opted_in(
    host_sockets: dict[str, str], workspace: Path
) -> None:
    (workspace / "connect.py").write_text(CONNECT + (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect('\\0{host_sockets['abstract'][1:]}'); print('abstract connected')\n"
        "except OSError as exc:\n"
        "    print('abstract refused', type(exc).__name__)\n"
    ))
    run_sock, tmp_sock = host_sockets["run"], host_sockets["tmp"]
    tag = Path(run_sock).parent.name
    command = (f"echo ==ls==; ls -A /run /var/run; echo ==end==; "
               f"test -S {tmp_sock} && echo tmp-is-a-socket; "
               f"{sys.executable} connect.py {run_sock} /var/run/{tag}/docker.sock {tmp_sock}")
    out = await approved_shell(command, workspace)
    assert "==end==" in out, out
    assert tag not in out.split("==ls==")[1].split("==end==")[0]  # not under /run, /var/run
    assert "tmp-is-a-socket" not in out
    assert "connected" not in out, out
    assert "abstract refused" in out  # abstract sockets: the network namespace's part
    # opted in (any spelling of the path), the same sockets answer: the test can fail
    out = await approved_shell(command, workspace, tool_exposed_paths={
        "shell": (f"/var/run/{tag}/docker.sock", tmp_sock)})
    assert f"connected {run_sock}" in out and f"connected {tmp_sock}" in out, out
    assert f"connected /var/run/{tag}/docker.sock" in out and "tmp-is-a-socket" in out, out


@needs_sandbox
def test_what_etc_links_to_in_a_covered_directory_stays_readable(sock_tmp: Path) -> None:
    """/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf, rebuilt under
    sock_tmp: the file is shown read-only in the covered directory, the sockets
    beside it and everything else there are not."""
    run, etc, ws = sock_tmp / "run", sock_tmp / "etc", sock_tmp / "ws"
    resolve = run / "systemd" / "resolve"
    for directory in (resolve, run / "postgresql", etc, ws):
        directory.mkdir(parents=True)
    (resolve / "stub-resolv.conf").write_text("nameserver 127.0.0.53\n")
    (etc / "resolv.conf").symlink_to(resolve / "stub-resolv.conf")
    (etc / "hostname").write_text("not a link\n")
    servers = [_listen(str(resolve / "io.systemd.Resolve")),
               _listen(str(run / "postgresql" / ".s.PGSQL.5432"))]
    try:
        kept = etc_files_under([str(run)], etc=str(etc))
        assert kept == [str(resolve / "stub-resolv.conf")]
        plan = build_plan(str(ws), services=[str(run)], keep=kept)
        (ws / "connect.py").write_text(CONNECT)
        script = (f"cat {etc}/resolv.conf; find {run} | sort; echo x > {resolve}/new; "
                  f"{sys.executable} connect.py {resolve}/io.systemd.Resolve")
        done = subprocess.run(sandboxed(["/bin/sh", "-c", script], plan), cwd=ws,
                              capture_output=True, text=True, timeout=30, check=False)
    finally:
        for server in servers:
            server.close()
    assert "nameserver 127.0.0.53" in done.stdout, done.stdout + done.stderr
    assert done.stdout.split("\n", 1)[1].split("refused")[0].split() == [
        str(run), str(run / "systemd"), str(resolve), str(resolve / "stub-resolv.conf")]
    assert "Read-only file system" in done.stderr and not (resolve / "new").exists()
    assert f"refused {resolve}/io.systemd.Resolve" in done.stdout


@needs_sandbox
async def test_a_tool_opted_into_the_network_still_resolves_names(workspace: Path) -> None:
    """Its /etc/resolv.conf reads as the host's (also where it links into /run),
    and names resolve as they do on the host."""
    code = ("import socket\nfor name in ('localhost', 'example.com'):\n    try:\n"
            "        socket.getaddrinfo(name, 80); print('resolved', name)\n"
            "    except OSError:\n        print('unresolved', name)\n")
    (workspace / "resolve.py").write_text(code)
    command = f"cat /etc/resolv.conf; {sys.executable} resolve.py"
    host = subprocess.run(["/bin/sh", "-c", command], cwd=workspace, capture_output=True,
                          text=True, timeout=60, check=False).stdout
    out = await approved_shell(command, workspace, tool_network_tools=("shell",))
    assert "resolved localhost" in host and f"--- stdout ---\n{host}" in out, (host, out)


def test_sockets_are_found_to_their_depth(sock_tmp: Path) -> None:
    (sock_tmp / "a" / "b").mkdir(parents=True)
    os.mkfifo(sock_tmp / "fifo")
    servers = [_listen(str(sock_tmp / "top.sock")), _listen(str(sock_tmp / "a" / "one.sock")),
               _listen(str(sock_tmp / "a" / "b" / "deep.sock"))]
    (sock_tmp / "file").write_text("x")
    (sock_tmp / "link.sock").symlink_to(sock_tmp / "top.sock")
    try:
        found = sorted(endpoints([(str(sock_tmp), 2)]))
    finally:
        for server in servers:
            server.close()
    assert found == sorted([str(sock_tmp / "top.sock"), str(sock_tmp / "a" / "one.sock"),
                            str(sock_tmp / "fifo")])


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql+asyncpg://postgres@/parkgate?host=/srv/pg", ["/srv/pg"]),
    ("postgresql+asyncpg://postgres@%2Fsrv%2Fpg/parkgate", ["/srv/pg"]),
    ("postgresql+asyncpg://postgres@127.0.0.1:5433/parkgate",
     ["/run/postgresql", "/run/postgresql", "/tmp/.s.PGSQL.5433"]),
    ("postgresql+asyncpg://postgres@db.example:5432/parkgate", []),
    ("sqlite+aiosqlite:///x.db", []),
])
def test_the_databases_socket_is_a_service_path(
    tmp_path: Path, url: str, expected: list[str]
) -> None:
    settings = Settings(data_dir=tmp_path / "d", workspace_roots=[tmp_path], database_url=url,
                        tool_service_paths=[tmp_path / "docker.sock"])
    wanted = [str(Path(p).resolve()) for p in dict.fromkeys(expected)]
    wanted.append(str(tmp_path / "docker.sock"))
    assert Limits.from_settings(settings).tool_service_paths == tuple(wanted)
    # not among the hidden paths: those no opt-in can show
    assert not any(str(p) in wanted for p in settings.hidden_tool_paths())


def test_exposed_paths_are_absolute_and_shown_by_config_check(tmp_path: Path) -> None:
    base = {"data_dir": tmp_path / "d", "workspace_roots": [tmp_path]}
    with pytest.raises(ValueError, match="must be an absolute path"):
        Settings(**base, tool_exposed_paths={"shell": ["run/postgresql"]})
    settings = Settings(**base, tool_exposed_paths={"shell": ["/run/postgresql"]})
    assert Limits.from_settings(settings).tool_exposed_paths == {"shell": ("/run/postgresql",)}
    from rich.console import Console

    console = Console(record=True, width=240)
    console.print(network_table(settings, load_registry()))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines()
            if "│" in line}
    assert "/run/postgresql" in rows["shell"] and "/run/postgresql" not in rows["read_file"]
    console = Console(record=True, width=240)
    console.print(settings_table(settings))
    assert "shell=/run/postgresql" in console.export_text()


@needs_sandbox
@needs_root
def test_a_non_root_worker_hides_run_too() -> None:
    """In a user namespace (a worker that is not root) /run is covered as well,
    and an opted-in path under it is shown."""
    from tests.dispatcher.unprivileged import run_unprivileged

    with tempfile.TemporaryDirectory(prefix="parkgate-unprivileged-ws-") as tmp:
        Path(tmp).chmod(0o777)  # pytest's own tmp_path is out of uid 65534's reach
        _non_root_hides_run(Path(tmp), run_unprivileged)


def _non_root_hides_run(workspace: Path, run_unprivileged: Any) -> None:
    marker = Path("/run") / f"parkgate-test-{os.getpid()}-{secrets.token_hex(3)}"
    marker.mkdir(mode=0o755)
    code = (
        "import subprocess\n"
        f"for exposed in ((), ({str(marker)!r},)):\n"
        "    plan = plan_for(Limits(tool_exposed_paths={'shell': exposed}), "
        f"{str(workspace)!r}, 'shell')\n"
        "    argv = sandboxed(['/bin/sh', '-c', 'ls -A /run; echo ==end=='], plan)\n"
        f"    done = subprocess.run(argv, cwd={str(workspace)!r}, capture_output=True, "
        "text=True)\n"
        "    print('RUN:' + ' '.join(done.stdout.split()), done.stderr)\n"
    )
    try:
        done = run_unprivileged("from parkgate.sandbox.launch import sandboxed, plan_for\n"
                                "from parkgate.truncation import Limits", code)
    finally:
        marker.rmdir()
    runs = [line for line in done.stdout.splitlines() if line.startswith("RUN:")]
    assert runs == ["RUN:==end== ", f"RUN:{marker.name} ==end== "], done.stdout + done.stderr


@needs_sandbox
def test_a_socket_gone_before_the_sandbox_is_set_up_is_no_error(sock_tmp: Path) -> None:
    """Sockets are looked for when the call starts; one that goes away before the
    namespace's mounts are made (a server stopping) must not fail the call, and
    one still there is muted."""
    ws = sock_tmp / "ws"
    ws.mkdir()
    gone, kept = sock_tmp / "gone.sock", sock_tmp / "kept.sock"
    servers = [_listen(str(gone)), _listen(str(kept))]
    try:
        plan = build_plan(str(ws), endpoints=[str(gone), str(kept)])
        argv = sandboxed(["/bin/sh", "-c", f"test -S {kept} || echo muted; echo ran"], plan)
        servers[0].close()
        gone.unlink()
        done = subprocess.run(argv, cwd=ws, capture_output=True, text=True, timeout=30,
                              check=False)
    finally:
        for server in servers:
            server.close()
    assert done.returncode == 0 and done.stdout == "muted\nran\n", done.stdout + done.stderr


def test_a_system_directory_is_no_service_directory(tmp_path: Path) -> None:
    """`tool_service_paths: [/usr]` would take the tool's own shell: not covered
    (one warning), like tool_hidden_paths; /run is."""
    plan = build_plan(str(tmp_path), services=["/", "/usr", "/etc", "/run"])
    assert plan.ops == [("hide", "/run")]
