"""What an approved tool can reach (issue 28): not the Temporal frontend or any
other host service (a network namespace of its own unless opted in), not other
workspaces, data directories or logs, and not parkgate's code or virtualenv to
write; its own workspace stays writable. Every call here is a real sandboxed
shell process run by the dispatcher, as a hostile agent would write it."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.testing import WorkflowEnvironment

import parkgate
from parkgate import ConfirmationPolicy, Limits, Session, ToolDispatcher, ToolUseBlock
from parkgate.cli.config import check_settings, load_registry, network_table
from parkgate.sandbox.launch import probe, sandboxed
from parkgate.sandbox.plan import build_plan
from parkgate.settings import Settings
from parkgate.tools import builtin_tools, composed_tools
from tests.dispatcher.unprivileged import run_unprivileged
from tests.fixtures.required import (
    in_ci,
    namespaces_missing,
    needs_net_sandbox,
    needs_pg_socket_dir,
    needs_root,
)

needs_sandbox = needs_net_sandbox

#: What the hostile tool runs against Temporal: look for the frontend in
#: /proc/net/tcp, connect over raw TCP, then with the temporalio SDK.
TEMPORAL_PROBE = """
import asyncio, socket, sys
host, port = sys.argv[1].rsplit(":", 1)
rows = [row for name in ("/proc/net/tcp", "/proc/net/tcp6")
        for row in open(name).read().splitlines()[1:]]
print("listed", any(r.split()[1].endswith(":%04X" % int(port)) for r in rows))
try:
    socket.create_connection((host, int(port)), timeout=3).close()
    print("tcp connected")
except OSError as exc:
    print("tcp failed", exc)
from temporalio.client import Client
async def main():
    try:
        await asyncio.wait_for(Client.connect(sys.argv[1]), 20)  # asks for system info
        print("sdk connected")
    except Exception as exc:
        print("sdk failed", type(exc).__name__)
asyncio.run(main())
"""


def dispatcher(**limits: Any) -> ToolDispatcher:
    policy = ConfirmationPolicy.from_mapping({"per_tool": {"shell": "auto"}})
    return ToolDispatcher(policy, tools=[*builtin_tools(), *composed_tools()],
                          limits=Limits(**limits))


async def shell(command: str, workspace: Path, **limits: Any) -> tuple[str, bool]:
    """Run `command` through the dispatcher (classify -> execute, as a model's call);
    (stdout + stderr, is_error)."""
    result = await dispatcher(**limits).dispatch(
        ToolUseBlock(id="hostile", name="shell", input={"command": command}),
        Session(session_id="s", turn_id="t", workspace_path=str(workspace)),
    )
    return result.text, bool(result.is_error)


def temporal_address(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


@needs_sandbox
async def test_a_tool_cannot_reach_the_temporal_frontend_unless_opted_in(
    temporal_env: WorkflowEnvironment, workspace: Path
) -> None:
    (workspace / "probe.py").write_text(TEMPORAL_PROBE)
    address = temporal_address(temporal_env)
    command = f"{sys.executable} probe.py {address}"

    isolated, _ = await shell(command, workspace)
    assert "listed False" in isolated  # the frontend is not even in its /proc/net/tcp
    assert "tcp failed" in isolated and "tcp connected" not in isolated
    assert "sdk failed" in isolated and "sdk connected" not in isolated

    # The same call opted in (by name, then by class) reaches it: the test can fail.
    by_name, _ = await shell(command, workspace, tool_network_tools=("shell",))
    assert "listed True" in by_name, by_name
    assert "tcp connected" in by_name and "sdk connected" in by_name, by_name
    by_class, _ = await shell(command, workspace, tool_network_classes=("execute",))
    assert "tcp connected" in by_class and "sdk connected" in by_class, by_class


@needs_sandbox
async def test_an_isolated_tool_has_a_working_loopback_of_its_own(workspace: Path) -> None:
    code = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "c = socket.create_connection(s.getsockname()); print('own loopback ok')")
    out, is_error = await shell(f"{sys.executable} -c \"{code}\"", workspace)
    assert "own loopback ok" in out and not is_error, out


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """A host with two sessions' workspaces under one root, the configured data
    directory, another instance's (PARKGATE_DATA_DIR) and a `~/.parkgate-old`."""
    work = tmp_path / "work"
    mine, theirs = work / "mine", work / "theirs"
    for ws in (mine, theirs):
        ws.mkdir(parents=True)
    (theirs / "notes.txt").write_text("their-private-notes")
    home = tmp_path / "home"
    paths = {"work": work, "mine": mine, "theirs": theirs, "home": home,
             "data": tmp_path / "data", "other": tmp_path / "other-data",
             "old": home / ".parkgate-old"}
    for name in ("data", "other", "old"):
        paths[name].mkdir(parents=True, mode=0o700)
        (paths[name] / "link-secret").write_text(f"link-secret-of-{name}")
    monkeypatch.setenv("PARKGATE_DATA_DIR", str(paths["other"]))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PARKGATE_CONFIG", raising=False)
    yield paths


def limits_of(settings: Settings, **overrides: Any) -> dict[str, Any]:
    return dict(Limits.from_settings(settings, **overrides))


@needs_sandbox
async def test_a_tool_sees_its_workspace_and_no_other_workspace_or_data_dir(
    host: dict[str, Path],
) -> None:
    settings = Settings(data_dir=host["data"], workspace_roots=[host["work"]])
    command = (
        f"echo ==roots==; ls -A {host['work']}; "
        f"echo ==theirs==; cat {host['theirs']}/notes.txt; ls -A {host['theirs']}; "
        f"echo ==secrets==; cat {host['data']}/link-secret {host['other']}/link-secret "
        f"{host['old']}/link-secret; "
        f"echo ==mine==; echo written > mine.txt && cat {host['mine']}/mine.txt; "
        "echo ==end=="
    )
    out, _ = await shell(command, host["mine"], **limits_of(settings))
    assert "==end==" in out, out
    assert out.split("==roots==\n", 1)[1].split("==", 1)[0] == "mine\n"
    assert "their-private-notes" not in out
    assert "link-secret-of" not in out
    assert "written" in out.split("==mine==", 1)[1]
    assert (host["mine"] / "mine.txt").read_text() == "written\n"
    # nothing changed outside
    assert (host["theirs"] / "notes.txt").read_text() == "their-private-notes"


@needs_sandbox
async def test_another_projects_own_workspace_root_is_hidden(
    host: dict[str, Path], tmp_path: Path,
) -> None:
    """A project's own roots (`project_workspace_roots`) are workspaces too: a
    tool of another project's session sees nothing under them."""
    elsewhere = tmp_path / "alpha-root" / "ws"
    elsewhere.mkdir(parents=True)
    (elsewhere / "plans.txt").write_text("alpha-private-plans")
    settings = Settings(data_dir=host["data"], workspace_roots=[host["work"]],
                        project_workspace_roots={"alpha": [tmp_path / "alpha-root"]})
    out, _ = await shell(f"cat {elsewhere}/plans.txt; ls -A {tmp_path / 'alpha-root'}; "
                         "echo ==end==", host["mine"], **limits_of(settings))
    assert "==end==" in out, out
    assert "alpha-private-plans" not in out
    assert "ws" not in out.split("==end==")[0].split()


@needs_sandbox
async def test_the_workers_log_files_are_hidden(
    workspace: Path, tmp_path: Path
) -> None:
    log_file = tmp_path / "logs" / "worker.log"
    log_file.parent.mkdir()
    handler = logging.FileHandler(log_file)
    logger = logging.getLogger("parkgate.test-reach")
    logger.addHandler(handler)
    try:
        logger.warning("PARKGATE_API_KEY=pk-from-the-log")
        handler.flush()
        out, _ = await shell(f"cat {log_file}; echo ==end==", workspace)
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert "==end==" in out and "pk-from-the-log" not in out


@needs_sandbox
def test_a_serve_log_on_stdout_is_hidden(tmp_path: Path) -> None:
    """`parkgate serve > serve.log`: the worker's stdout is a file holding the keys."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = tmp_path / "serve.log"
    script = (
        "import asyncio, sys\n"
        "print('PARKGATE_API_KEY=pk-printed-at-start', flush=True)\n"
        "from tests.dispatcher.test_sandbox_reach import shell\n"
        "from pathlib import Path\n"
        f"out, _ = asyncio.run(shell('cat {log}; echo ==end==', Path({str(workspace)!r})))\n"
        "sys.stderr.write('RESULT:' + out)\n"
    )
    with log.open("w") as stdout:
        done = subprocess.run([sys.executable, "-c", script], stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=Path(__file__).parents[2], check=False)
    assert done.returncode == 0, done.stderr
    result = done.stderr.split("RESULT:", 1)[1]
    assert "==end==" in result and "pk-printed-at-start" not in result
    assert "pk-printed-at-start" in log.read_text()  # it was there to read


def _planted_targets() -> list[Path]:
    package = Path(parkgate.__path__[0])
    real_source = Path(os.path.realpath(package / "__init__.py")).parent
    return [
        package / "planted_by_tool.py",
        real_source / "planted_by_tool.py",
        Path(sys.prefix) / "planted_by_tool",
        Path(sysconfig.get_paths()["purelib"]) / "planted_by_tool.pth",
        Path(sysconfig.get_paths()["scripts"]) / "planted_by_tool",
    ]


@needs_sandbox
async def test_a_tool_cannot_write_parkgates_code_or_environment(workspace: Path) -> None:
    targets = _planted_targets()
    command = "; ".join(f"echo 'import os' > {t}" for t in targets)
    command += (f"; {sys.executable} -c 'import parkgate, temporalio; print(\"imports ok\")'"
                "; echo kept > here.txt")
    try:
        out, _ = await shell(command, workspace)
        planted = [t for t in targets if t.exists()]
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
    assert planted == [], out
    assert out.count("Read-only file system") == len(targets), out
    assert "imports ok" in out  # read-only, not hidden: the venv's python still runs
    assert (workspace / "here.txt").read_text() == "kept\n"


@needs_sandbox
def test_a_workspace_inside_parkgates_installation_is_read_only(tmp_path: Path) -> None:
    installed = tmp_path / "site" / "parkgate"
    workspace = installed / "api"
    workspace.mkdir(parents=True)
    plan = build_plan(str(workspace), protected=[str(installed)])
    argv = sandboxed(["/bin/sh", "-c", "echo planted > planted.py"], plan)
    done = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode != 0 and "Read-only" in done.stderr
    assert not (workspace / "planted.py").exists()


def _nets_refused_unshare(tmp_path: Path) -> str:
    """An `unshare` that cannot make network namespaces (like a kernel without
    CONFIG_NET_NS, or a seccomp profile that refuses CLONE_NEWNET)."""
    real = shutil.which("unshare")
    fake = tmp_path / "bin" / "unshare"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        '  [ "$a" = -- ] && break\n'
        '  [ "$a" = --net ] && { echo "unshare: unshare failed: Operation not permitted" >&2;'
        " exit 1; }\n"
        "done\n"
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    return str(fake)


@pytest.fixture
def host_service() -> Iterator[int]:
    """A service on the host's loopback (a stand-in for Temporal or PostgreSQL)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


@needs_sandbox
async def test_without_network_namespaces_auto_degrades_and_required_refuses(
    workspace: Path, tmp_path: Path, host_service: int, caplog: pytest.LogCaptureFixture
) -> None:
    unshare = _nets_refused_unshare(tmp_path)
    assert probe(unshare) is None and probe(unshare, net=True) is not None
    connect = (f"{sys.executable} -c \"import socket; "
               f"socket.create_connection(('127.0.0.1', {host_service}), 3); print('reached')\"")
    secret = tmp_path / "data"
    secret.mkdir()
    (secret / "link-secret").write_text("still-hidden")
    command = f"cat {secret}/link-secret; {connect}; echo ran > ran.txt"
    hidden = (str(secret),)
    with caplog.at_level(logging.WARNING, logger="parkgate.sandbox"):
        out, _ = await shell(command, workspace, tool_sandbox_unshare=unshare,
                             tool_hidden_paths=hidden)
    assert "reached" in out  # honest: no namespace, the host network is reachable
    assert "still-hidden" not in out  # but the rest of the sandbox holds
    assert any("no network namespace" in r.getMessage() for r in caplog.records)

    (workspace / "ran.txt").unlink()
    out, is_error = await shell(command, workspace, tool_sandbox="required",
                                tool_sandbox_unshare=unshare, tool_hidden_paths=hidden)
    assert is_error and "network namespace" in out and "was not run" in out
    assert not (workspace / "ran.txt").exists()
    # a tool opted in to the network does not need one, even under required
    out, is_error = await shell(command, workspace, tool_sandbox="required",
                                tool_sandbox_unshare=unshare, tool_hidden_paths=hidden,
                                tool_network_tools=("shell",))
    assert "reached" in out and not is_error
    assert (workspace / "ran.txt").exists()


@needs_sandbox
@needs_root
async def test_tools_run_as_the_dedicated_tool_user(workspace: Path, tmp_path: Path) -> None:
    os.chmod(workspace, 0o777)
    root_owned = workspace / "root-owned"  # reachable for the tool user, not writable
    root_owned.mkdir(mode=0o755)
    out, _ = await shell(
        "id -u; id -g; echo mine > mine.txt; echo x > root-owned/x; echo ==end==",
        workspace, tool_user="65534:65534",
    )
    assert "--- stdout ---\n65534\n65534\n==end==" in out, out
    assert "root-owned/x: Permission denied" in out
    assert (workspace / "mine.txt").stat().st_uid == 65534
    assert not (root_owned / "x").exists() and "==end==" in out
    # unsandboxed, the switch still happens
    out, _ = await shell("id -u", workspace, tool_user="65534:65534", tool_sandbox="off")
    assert "--- stdout ---\n65534\n" in out, out


async def test_an_unusable_tool_user_refuses_to_run(workspace: Path, tmp_path: Path) -> None:
    out, is_error = await shell("echo ran > ran.txt", workspace,
                                tool_user="no-such-user-parkgate")
    assert is_error and "no user named" in out and "was not run" in out
    assert not (workspace / "ran.txt").exists()
    problems = check_settings(Settings(data_dir=tmp_path / "d", workspace_roots=[tmp_path],
                                       tool_user="no-such-user-parkgate"))
    assert any("no user named 'no-such-user-parkgate'" in p for p in problems), problems


@needs_root
def test_a_non_root_worker_cannot_switch_to_a_tool_user() -> None:
    code = "try:\n    resolve('65533:65533')\nexcept ToolUserError as exc:\n    print(exc)\n"
    done = run_unprivileged("from parkgate.sandbox.tool_user import resolve, ToolUserError", code)
    assert "not root" in done.stdout, done.stdout + done.stderr


@needs_sandbox
@needs_pg_socket_dir
async def test_the_history_databases_unix_socket_is_hidden(
    workspace: Path, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", workspace_roots=[workspace],
                        database_url="postgresql+asyncpg://postgres@127.0.0.1:5432/parkgate")
    out, _ = await shell("ls -A /run/postgresql /var/run/postgresql; echo ==end==", workspace,
                         **limits_of(settings))
    assert ".s.PGSQL" not in out and "==end==" in out


def _rendered(table: Any) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_config_check_lists_which_tools_reach_the_network(tmp_path: Path) -> None:
    base = {"data_dir": tmp_path / "data", "workspace_roots": [tmp_path]}
    registry = load_registry()
    closed = _rendered(network_table(Settings(**base), registry))
    rows = {line.split("│")[1].strip(): line for line in closed.splitlines() if "│" in line}
    # The machine's answer, not the probe's; under CI the namespaces must be there.
    if namespaces_missing(net=True) is None or in_ci():
        assert "isolated" in rows["shell"] and "host network" not in closed
    opened = _rendered(network_table(Settings(**base, tool_network_tools=["shell"]), registry))
    rows = {line.split("│")[1].strip(): line for line in opened.splitlines() if "│" in line}
    assert "host network (tool_network_tools)" in rows["shell"]
    # atomic_edit_checked runs its check through shell: it reaches what shell reaches
    assert "through shell" in rows["atomic_edit_checked"]
    off = _rendered(network_table(Settings(**base, tool_sandbox="off"), registry))
    assert "host network (tool_sandbox: off)" in off


def test_network_classes_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown side-effect class 'internet'"):
        Settings(data_dir=tmp_path, workspace_roots=[tmp_path], tool_network_classes=["internet"])
    settings = Settings(data_dir=tmp_path, workspace_roots=[tmp_path],
                        tool_network_classes=["NETWORK"])
    assert Limits.from_settings(settings).tool_network_classes == ("network",)


def test_every_known_data_dir_is_hidden(host: dict[str, Path]) -> None:
    """The configured data dir, PARKGATE_DATA_DIR's and ~/.parkgate*: hidden, untouched."""
    settings = Settings(data_dir=host["data"], workspace_roots=[host["work"]])
    hidden = settings.hidden_tool_paths()
    for name in ("data", "other", "old"):
        assert host[name].resolve() in hidden, name
        assert stat.S_IMODE(host[name].stat().st_mode) == 0o700


@needs_sandbox
@pytest.mark.parametrize("nested", [False, True])
async def test_a_data_dir_inside_the_workspace_stays_hidden_by_relative_paths_too(
    host: dict[str, Path], nested: bool
) -> None:
    """The quick start's shape: workspace_roots [~], data in ~/.parkgate, and a
    session whose workspace is ~ itself (or a workspace under a covered root)."""
    workspace = host["mine"] if nested else host["home"]
    data = workspace / ".parkgate"
    data.mkdir(mode=0o700)
    (data / "link-secret").write_text("link-secret-in-the-workspace")
    root = host["work"] if nested else host["home"]
    settings = Settings(data_dir=data, workspace_roots=[root])
    out, _ = await shell(
        f"cat .parkgate/link-secret ./.parkgate/link-secret {data}/link-secret; "
        "ls -A .parkgate; echo ok > kept.txt; echo ==end==",
        workspace, **limits_of(settings),
    )
    assert "==end==" in out and "link-secret-in-the-workspace" not in out, out
    assert (workspace / "kept.txt").read_text() == "ok\n"


def file_dispatcher(**limits: Any) -> ToolDispatcher:
    policy = ConfirmationPolicy.from_mapping({"default": {"WRITE": "auto"}})
    return ToolDispatcher(policy, tools=builtin_tools(), limits=Limits(**limits))


async def test_file_tools_cannot_read_a_data_dir_the_workspace_holds(
    host: dict[str, Path],
) -> None:
    """In-process file tools: the quick start's workspace `~` holds `~/.parkgate`."""
    data = host["home"] / ".parkgate"
    data.mkdir(mode=0o700)
    (data / "link-secret").write_text("link-secret-in-home")
    settings = Settings(data_dir=data, workspace_roots=[host["home"]])
    session = Session(session_id="s", turn_id="t", workspace_path=str(host["home"]))
    d = file_dispatcher(**limits_of(settings))
    for i, (name, args) in enumerate([
        ("read_file", {"path": ".parkgate/link-secret"}),
        ("read_file", {"path": str(data / "link-secret")}),
        ("list_dir", {"path": ".parkgate"}),
        ("write_file", {"path": ".parkgate/link-secret", "content": "mine"}),
    ]):
        result = await d.dispatch(ToolUseBlock(id=f"f{i}", name=name, input=args), session)
        assert result.is_error and "off limits" in result.text, (name, result.text)
    assert (data / "link-secret").read_text() == "link-secret-in-home"
    ok = await d.dispatch(ToolUseBlock(id="ok", name="write_file",
                                       input={"path": "notes.txt", "content": "fine"}), session)
    assert not ok.is_error and (host["home"] / "notes.txt").read_text() == "fine"


def _package_source() -> Path:
    return Path(os.path.realpath(Path(parkgate.__path__[0]) / "__init__.py")).parent


async def test_file_tools_cannot_write_parkgates_code() -> None:
    """A session whose workspace is parkgate's own checkout (or site-packages)."""
    source = _package_source()
    target = source / "planted_by_tool.py"
    session = Session(session_id="s", turn_id="t", workspace_path=str(source))
    try:
        result = await file_dispatcher().dispatch(
            ToolUseBlock(id="plant", name="write_file",
                         input={"path": "planted_by_tool.py", "content": "import os\n"}),
            session)
        planted = target.exists()
    finally:
        target.unlink(missing_ok=True)
    assert result.is_error and "read-only to tools" in result.text, result.text
    assert not planted
    read = await file_dispatcher().dispatch(
        ToolUseBlock(id="read", name="read_file", input={"path": "__init__.py"}), session)
    assert not read.is_error  # reading parkgate's code is fine
