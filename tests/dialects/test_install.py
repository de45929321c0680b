"""`parkgate codex|gemini install`: merged into existing settings without losing
anything, pointing at the right parkgate with the absolute path of the
executable, and (Codex) trusted as the real `codex app-server` reports it."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from parkgate.dialects.hook_files import HookFileError, codex_hooks, set_trusted_hash
from parkgate.runtime.ports import free_port
from tests.claude_code.conftest import PARKGATE
from tests.fixtures.serve import Serve, serve_environment


def run(*args: str, home: Path, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("PARKGATE_", "CODEX_"))}
    full.update({"HOME": str(home), "PARKGATE_DATA_DIR": str(home / "pg"),
                 "PARKGATE_GEMINI_WAIT_SECONDS": "40", "PARKGATE_CODEX_WAIT_SECONDS": "40",
                 **(env or {})})
    done = subprocess.run([str(PARKGATE), *args], capture_output=True, text=True, env=full,
                          timeout=120, check=False)
    if check:
        assert done.returncode == 0, done.stderr + done.stdout
    return done


def test_set_trusted_hash_keeps_the_rest() -> None:
    text = 'model = "m"\n\n[hooks.state."/h.json:pre_tool_use:0:0"]\ntrusted_hash = "old"\n' \
           'enabled = true\n\n[other]\nx = 1\n'
    out = set_trusted_hash(text, "/h.json:pre_tool_use:0:0", "sha256:new")
    parsed = tomllib.loads(out)
    assert parsed["hooks"]["state"]["/h.json:pre_tool_use:0:0"] == {
        "trusted_hash": "sha256:new", "enabled": True}
    assert parsed["other"] == {"x": 1} and parsed["model"] == "m"
    added = set_trusted_hash(out, '/a "b".json:post_tool_use:1:0', "sha256:x")
    assert tomllib.loads(added)["hooks"]["state"]['/a "b".json:post_tool_use:1:0'] == {
        "trusted_hash": "sha256:x"}
    with pytest.raises(HookFileError, match="TOML"):
        set_trusted_hash("[[broken", "k", "h")


def test_codex_hooks_json_refuses_what_codex_would_reject() -> None:
    with pytest.raises(HookFileError, match="only `hooks`"):
        codex_hooks({"PreToolUse": []}, "pg hook codex", 70)
    merged = codex_hooks({}, "pg hook codex", 70)
    assert isinstance(merged["hooks"]["PreToolUse"][0]["hooks"][0]["timeout"], int)


def test_gemini_install_merges_replaces_and_points_at_the_stack(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    mine = {"type": "command", "command": "/usr/local/bin/lint-hook", "timeout": 5000}
    settings.write_text(json.dumps({"theme": "dark", "hooks": {
        "BeforeTool": [{"matcher": "write_file", "hooks": [mine]}],
        "SessionStart": [{"hooks": [mine]}]}}))
    missing = run("gemini", "install", "--check", home=tmp_path, check=False)
    assert missing.returncode != 0 and "not in" in missing.stderr + missing.stdout
    run("gemini", "install", home=tmp_path, env={"PARKGATE_API_URL": "http://pg.internal:9"})
    run("gemini", "install", "--url", "http://10.0.0.5:8420/", home=tmp_path)  # again
    merged = json.loads(settings.read_text())
    assert merged["theme"] == "dark"
    assert merged["hooks"]["SessionStart"] == [{"hooks": [mine]}]
    before = merged["hooks"]["BeforeTool"]
    assert before[0] == {"matcher": "write_file", "hooks": [mine]}
    ours = [h for g in before for h in g["hooks"] if "hook gemini" in h["command"]]
    assert len(ours) == 1  # replaced, not duplicated
    assert ours[0]["timeout"] == 70_000  # milliseconds: the 40 s hold + 30 s
    assert ours[0]["command"] == (f"{PARKGATE} hook gemini --url http://10.0.0.5:8420 "
                                  "--timeout 65")
    assert run("gemini", "install", "--check", home=tmp_path).returncode == 0


def test_the_url_comes_from_the_environment_else_the_settings(tmp_path: Path) -> None:
    env = run("gemini", "install", "--print", home=tmp_path,
              env={"PARKGATE_API_URL": "http://pg.internal:9/"}).stdout
    assert "--url http://pg.internal:9 " in env
    default = run("gemini", "install", "--print", home=tmp_path,
                  env={"PARKGATE_PUBLIC_BASE_URL": "http://phone.example:1"}).stdout
    assert "--url http://phone.example:1 " in default
    claude = run("claude-code", "install", "--print", "--command", "--project",
                 str(tmp_path), home=tmp_path, env={"PARKGATE_API_URL": "http://pg.internal:9"})
    command = json.loads(claude.stdout)["hooks"]["PreToolUse"][-1]["hooks"][0]["command"]
    assert command.startswith(f"{PARKGATE} hook claude-code --url http://pg.internal:9 ")


def test_codex_install_trusts_its_hooks_as_codex_reports(codex_cli: Path, tmp_path: Path
                                                        ) -> None:
    codex_home = tmp_path / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text('model = "gpt-fake"\n\n[tui]\nx = 1\n')
    mine = {"type": "command", "command": "/usr/local/bin/audit-hook", "timeout": 5}
    (codex_home / "hooks.json").write_text(json.dumps({"hooks": {
        "Stop": [{"hooks": [mine]}]}}))
    env = {"CODEX_HOME": str(codex_home), "PATH": f"{codex_cli.parent}:{os.environ['PATH']}"}
    untrusted = run("codex", "install", "--check", home=tmp_path, env=env, check=False)
    assert untrusted.returncode != 0 and "not installed" in untrusted.stderr + untrusted.stdout
    run("codex", "install", "--url", "http://127.0.0.1:9", home=tmp_path, env=env)
    hooks = json.loads((codex_home / "hooks.json").read_text())
    assert hooks["hooks"]["Stop"] == [{"hooks": [mine]}]
    pre = hooks["hooks"]["PreToolUse"][0]["hooks"][0]
    assert pre["timeout"] == 70 and pre["command"].startswith(f"{PARKGATE} hook codex ")
    config = tomllib.loads((codex_home / "config.toml").read_text())
    assert config["model"] == "gpt-fake" and config["tui"] == {"x": 1}
    assert len(config["hooks"]["state"]) == 2
    ok = run("codex", "install", "--check", home=tmp_path, env=env)
    assert "installed and trusted" in ok.stdout
    # Any edit of the hook loses Codex's trust, and --check says so.
    pre["timeout"] = 71
    (codex_home / "hooks.json").write_text(json.dumps(hooks))
    lost = run("codex", "install", "--check", home=tmp_path, env=env, check=False)
    assert lost.returncode != 0 and "NOT trusted" in lost.stderr + lost.stdout


@pytest.mark.devserver
@pytest.mark.slow  # a real `parkgate serve` (its own dev server)
def test_install_points_at_the_running_serve_of_the_data_dir(tmp_path: Path) -> None:
    """No --url and no PARKGATE_API_URL: the hook posts to the `parkgate serve`
    running on PARKGATE_DATA_DIR, not to public_base_url."""
    env = serve_environment(tmp_path)
    serve = Serve(env, free_port(), tmp_path / "serve.log")
    try:
        api = serve.wait_ready()["api"]
        out = subprocess.run(
            [str(PARKGATE), "gemini", "install", "--print"], capture_output=True, text=True,
            timeout=60, env={**env, "HOME": str(tmp_path),
                             "PARKGATE_PUBLIC_BASE_URL": "http://phone.example:1"})
        assert out.returncode == 0, out.stderr
        assert f"--url {api.rstrip('/')} " in out.stdout, (api, out.stdout)
        assert serve.interrupt() == 0, serve.text()
    finally:
        serve.kill()
