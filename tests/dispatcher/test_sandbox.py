"""The tool sandbox (issue 15): a shell tool cannot read the data directory,
hidden paths, secret files or the worker's /proc, yet keeps its workspace;
`required` without a sandbox is an error result, `auto` falls back once-warned."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from parkgate import Limits, ToolContext, ToolExecutionError, WorkspaceFileAPI
from parkgate.cli.config import check_settings
from parkgate.sandbox.launch import announce, paths_to_hide, state_line
from parkgate.settings import Settings
from parkgate.tools import ShellTool
from tests.dispatcher.unprivileged import run_unprivileged
from tests.fixtures.required import needs_root, needs_sandbox

LINK_SECRET = "sandbox-link-secret-5e1f"
PAYLOAD_KEY = "c2FuZGJveC1wYXlsb2FkLWtleS0zMi1ieXRlcy1sb25nISE="
MISSING_UNSHARE = "/nonexistent/bin/unshare"


def ctx(workspace: Path, **limits: Any) -> ToolContext:
    return ToolContext(
        session_id="s",
        turn_id="t",
        tool_use_id="tu",
        workspace_path=str(workspace),
        cancel_event=asyncio.Event(),
        logger=logging.getLogger("test"),
        workspace_files=WorkspaceFileAPI(str(workspace)),
        limits=Limits(**limits),
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory as a server leaves it: 0700, secrets 0600."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    for name, text in (("link-secret", LINK_SECRET), ("payload-key", PAYLOAD_KEY),
                       ("parkgate.db", "SQLite format 3"), ("temporal.db", "history")):
        (data / name).write_text(text)
        (data / name).chmod(0o600)
    return data


async def run(command: str, workspace: Path, **limits: Any) -> dict[str, Any]:
    out = await ShellTool().execute({"command": command}, ctx(workspace, **limits))
    return dict(out.metadata)


def section(stdout: str, name: str) -> str:
    """The lines printed between `==name==` and the next `==` marker."""
    after = stdout.split(f"=={name}==\n", 1)[1]
    return after.split("==", 1)[0]


@needs_sandbox
async def test_a_sandboxed_shell_sees_no_data_dir_and_keeps_its_workspace(
    workspace: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = tmp_path / "etc-secrets"
    extra.mkdir()
    (extra / "token").write_text("extra-hidden-token")
    monkeypatch.setenv("PARKGATE_LINK_SECRET", LINK_SECRET)  # in the worker's environ
    command = (
        f"env; cat {data_dir}/link-secret {data_dir}/payload-key; "
        f"echo ==data==; ls -A {data_dir}; echo ==extra==; ls -A {extra}; cat {extra}/token; "
        "echo ==proc==; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep PARKGATE_; "
        f"echo ==umount==; umount {data_dir} 2>&1; ls -A {data_dir}; "
        "echo ==ws==; cat README.md && echo made > made.txt && echo ==end=="
    )
    meta = await run(command, workspace, tool_hidden_paths=(str(data_dir), str(extra)))
    stdout, everything = meta["stdout"], meta["stdout"] + meta["stderr"]
    assert "PATH=" in stdout  # it ran
    for secret in (LINK_SECRET, PAYLOAD_KEY, "extra-hidden-token", "SQLite format 3"):
        assert secret not in everything
    assert section(stdout, "data") == ""  # no file of the data dir is listed
    assert section(stdout, "extra") == ""  # a tool_hidden_paths entry is empty
    assert section(stdout, "proc") == ""  # the worker's /proc/<pid>/environ is out of sight
    assert "superuser" in section(stdout, "umount") or "permission" in section(
        stdout, "umount").lower()  # no capability left to lift the cover
    assert "# Project Foo" in section(stdout, "ws")
    assert (workspace / "made.txt").read_text() == "made\n"  # the workspace is writable
    assert (data_dir / "link-secret").read_text() == LINK_SECRET  # untouched outside


@needs_sandbox
async def test_a_hidden_file_reads_empty_and_a_workspace_holder_is_covered_around_it(
    tmp_path: Path,
) -> None:
    # A secret file next to the workspace: its directory holds the workspace, so it
    # is covered with the way to the workspace kept (issue 28; before, it was left
    # uncovered), the file itself too, and the workspace stays usable.
    home = tmp_path / "home"
    workspace = home / "project"
    workspace.mkdir(parents=True)
    key = home / "tls.key"
    key.write_text("-----BEGIN PRIVATE KEY-----")
    (home / "sibling.txt").write_text("sibling-of-the-workspace")
    hidden = (str(home), str(key))
    assert paths_to_hide(Limits(tool_hidden_paths=hidden), str(workspace)) == [str(key)]
    meta = await run(f"cat {key} {home}/sibling.txt; echo x > here.txt && cat here.txt",
                     workspace, tool_hidden_paths=hidden)
    assert "PRIVATE KEY" not in meta["stdout"] and "sibling-of" not in meta["stdout"]
    assert meta["stdout"] == "x\n" and meta["exit_code"] == 0
    assert (workspace / "here.txt").read_text() == "x\n"


async def test_required_without_a_sandbox_is_an_error_result_not_a_crash(
    workspace: Path, data_dir: Path
) -> None:
    with pytest.raises(ToolExecutionError) as caught:
        await run(f"cat {data_dir}/link-secret > leaked.txt", workspace,
                  tool_sandbox="required", tool_sandbox_unshare=MISSING_UNSHARE)
    message = caught.value.message
    assert "sandbox could not be set up" in message and "was not run" in message
    assert MISSING_UNSHARE in message
    assert not (workspace / "leaked.txt").exists()


async def test_auto_without_a_sandbox_runs_unsandboxed_and_warns_once(
    workspace: Path, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unshare = f"/nonexistent/{os.getpid()}/unshare"  # a probe key no other test used
    with caplog.at_level(logging.WARNING, logger="parkgate.sandbox"):
        first = await run("echo one", workspace, tool_sandbox_unshare=unshare)
        second = await run(f"cat {data_dir}/link-secret", workspace,
                           tool_sandbox_unshare=unshare)
    assert first["stdout"] == "one\n"
    assert second["stdout"] == LINK_SECRET  # honest: without the sandbox it is readable
    warnings = [r for r in caplog.records if "tool sandbox unavailable" in r.getMessage()]
    assert len(warnings) == 1


async def test_off_never_wraps(workspace: Path, data_dir: Path) -> None:
    meta = await run(f"cat {data_dir}/link-secret; echo; echo $$", workspace, tool_sandbox="off",
                     tool_sandbox_unshare=MISSING_UNSHARE)
    assert meta["stdout"].startswith(LINK_SECRET)
    assert int(meta["stdout"].split()[-1]) > 1  # a host pid, not pid 1 of a namespace


def test_default_hidden_paths_cover_data_dir_and_secret_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = tmp_path / "tls"
    tls.mkdir()
    (tls / "client.key").write_text("k")
    config = tmp_path / "conf" / "server.yaml"
    config.parent.mkdir()
    config.write_text("api_port: 8420\n")
    monkeypatch.setenv("PARKGATE_CONFIG", str(config))
    settings = Settings(
        data_dir=tmp_path / "data",
        workspace_roots=[tmp_path / "ws"],
        temporal_tls_cert_path=tls / "client.pem",
        temporal_tls_key_path=tls / "client.key",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'db' / 'parkgate.db'}",
        tool_hidden_paths=[tmp_path / "extra"],
    )
    hidden = settings.hidden_tool_paths()
    for path in (tmp_path / "data", tls, tls / "client.key", config, config.parent,
                 tmp_path / "db", tmp_path / "db" / "parkgate.db", tmp_path / "extra"):
        assert path.resolve() in hidden
    limits = Limits.from_settings(settings)
    assert str((tmp_path / "data").resolve()) in limits.tool_hidden_paths
    assert limits.tool_sandbox == "auto"


def test_config_check_says_when_required_cannot_work(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", workspace_roots=[tmp_path],
                        tool_sandbox="required", tool_sandbox_unshare=MISSING_UNSHARE)
    problems = check_settings(settings)
    assert any(p.startswith("tool_sandbox: 'required' but the sandbox cannot be set up")
               for p in problems), problems
    assert "REQUIRED BUT UNAVAILABLE" in state_line("required", "x", 3)
    assert "network isolated unless opted in" in state_line("auto", None, 3)
    assert "network NOT isolated: no netns" in state_line("auto", None, 3, "no netns")
    assert "NO NETWORK NAMESPACE" in state_line("required", None, 3, "no netns")


@needs_sandbox
@needs_root
def test_the_probe_works_unprivileged_through_a_user_namespace() -> None:
    """What a non-root worker gets: unshare --user --map-root-user (when the
    kernel allows unprivileged user namespaces)."""
    # uid 65534 runs a readable copy of parkgate: the checkout may be out of its reach
    done = run_unprivileged("from parkgate.sandbox.launch import probe", "print(probe())")
    assert done.returncode == 0, done.stderr
    userns = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if userns.exists() and userns.read_text().strip() == "0":
        assert done.stdout.strip() != "None"  # disabled: the probe must say so
    else:
        assert done.stdout.strip() == "None", done.stdout


async def test_start_up_says_when_required_cannot_work(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="parkgate.sandbox"):
        line = await announce(Limits(tool_sandbox="required",
                                     tool_sandbox_unshare=MISSING_UNSHARE))
    assert "REQUIRED BUT UNAVAILABLE" in line and MISSING_UNSHARE in line
    assert [r.levelno for r in caplog.records] == [logging.ERROR]


#: A worker in miniature: runs one sandboxed shell command through the tool's
#: spawn, as the execute activity does, and waits for it.
_WORKER = """
import asyncio, logging, sys
from parkgate import Limits, ToolContext, WorkspaceFileAPI
from parkgate.tools import ShellTool
ws, user = sys.argv[1], sys.argv[3] or None
ctx = ToolContext(session_id="s", turn_id="t", tool_use_id="tu", workspace_path=ws,
                  cancel_event=asyncio.Event(), logger=logging.getLogger("w"),
                  workspace_files=WorkspaceFileAPI(ws),
                  limits=Limits(tool_sandbox="required", tool_user=user))
asyncio.run(ShellTool().execute({"command": sys.argv[2]}, ctx))
"""


@needs_sandbox
@pytest.mark.parametrize("user", ["", "65534:65534"])
async def test_a_sandboxed_command_dies_with_its_worker(
    workspace: Path, user: str, request: pytest.FixtureRequest
) -> None:
    """A worker SIGKILLed mid-run takes its tool's processes with it (also
    run as a dedicated tool user): the call is recorded `worker lost ...
    outcome unknown` and must not go on changing the workspace afterwards
    (nothing else would ever stop it)."""
    import signal
    import sys

    if user:
        request.getfixturevalue("root_here")  # only root switches to a tool user
    os.chmod(workspace, 0o777)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WORKER, str(workspace),
        "echo started > started.txt; sleep 2; echo after > after.txt", user)
    for _ in range(600):
        if await asyncio.to_thread((workspace / "started.txt").exists):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the command never started")
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    await asyncio.sleep(3.5)  # past the command's sleep
    assert not (workspace / "after.txt").exists()
