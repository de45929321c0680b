"""opencode's dialect and install, without opencode: what parkgate reads from
the plugin's events, what it answers, the plugin it writes and how it merges
opencode's config. (tests/agent_clis/test_opencode_gate.py runs the real CLI.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from parkgate import dialects
from parkgate.dialects import EventError
from parkgate.dialects.hook_files import HookFileError
from parkgate.dialects.opencode import OPENCODE
from parkgate.dialects.opencode_setup import merge_config, plugin_text, read_config, targets

PARKGATE = Path(sys.executable).parent / "parkgate"


def event(**fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "tool.execute.before", "session_id": "ses_abc123",
            "call_id": "call_1", "tool_name": "bash",
            "tool_input": {"command": "ls", "description": "list"}, "cwd": "/w", **fields}


def test_registered_at_its_endpoint() -> None:
    assert dialects.get("opencode") is OPENCODE
    assert OPENCODE.path == "/v1/hooks/opencode"


def test_before_and_after_events_are_read() -> None:
    call = OPENCODE.parse(event())
    assert (call.kind, call.session_id, call.call_id, call.tool_name) == (
        "pre", "ses_abc123", "call_1", "bash")
    after = OPENCODE.parse(event(hook_event_name="tool.execute.after",
                                 tool_response={"title": "ls", "output": "a.txt\n",
                                                "metadata": {"exit": 0}}))
    assert after.kind == "post"
    assert OPENCODE.response_text(after.response) == "a.txt\n"


@pytest.mark.parametrize("bad", [event(call_id=None), event(hook_event_name="chat.message"),
                                 event(tool_input=[1]), event(session_id="a b")])
def test_unreadable_events_say_why(bad: dict[str, Any]) -> None:
    with pytest.raises(EventError):
        OPENCODE.parse(bad)


def test_answers() -> None:
    assert OPENCODE.allow("ok") == {"decision": "allow", "reason": "ok"}
    edited = OPENCODE.allow("edited", {"command": "ls -a"})
    assert edited["args"] == {"command": "ls -a"} and OPENCODE.is_decision(edited)
    denied = OPENCODE.deny("no")
    assert denied == {"decision": "deny", "reason": "no"} and OPENCODE.is_deny(denied)
    assert OPENCODE.deny("  ")["reason"] == "parkgate"
    assert not OPENCODE.is_decision({}) and not OPENCODE.is_decision({"decision": "ask"})
    waiting = OPENCODE.waiting("http://pg/inbox (request r1)")
    assert OPENCODE.is_deny(waiting) and "call the tool again" in waiting["reason"].lower()


def test_tool_classes_and_views() -> None:
    assert OPENCODE.tools["read"] == "read" and OPENCODE.tools["write"] == "write"
    assert OPENCODE.tools["bash"] == "execute" and OPENCODE.tools["webfetch"] == "network"
    assert OPENCODE.views("write", {"filePath": "/w/a", "content": "x"}) == [
        ("Write", {"file_path": "/w/a"})]
    assert OPENCODE.views("bash", {"command": "cat /etc/passwd", "workdir": "/tmp"}) == [
        ("Bash", {"command": "cat /etc/passwd"}), ("LS", {"path": "/tmp"})]
    assert OPENCODE.views("lsp", {"operation": "hover", "filePath": "/w/a"}) == [
        ("Read", {"file_path": "/w/a"})]
    patch = "*** Begin Patch\n*** Update File: a/b\n@@\n-x\n+y\n*** Add File: /q\n+z\n" \
        "*** End Patch\n"
    assert OPENCODE.views("apply_patch", {"patchText": patch}) == OPENCODE.views(
        "patch", {"patchText": patch}) == [("Write", {"file_path": "a/b"}),
                                            ("Write", {"file_path": "/q"})]


def test_write_and_edit_show_the_diff(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    shown = OPENCODE.preview("edit", {"filePath": "a.txt", "oldString": "two",
                                      "newString": "three"}, str(tmp_path))
    assert shown is not None and "-two" in (shown.diff or "") and "+three" in (shown.diff or "")
    written = OPENCODE.preview("write", {"filePath": str(tmp_path / "b.txt"),
                                         "content": "new\n"}, str(tmp_path))
    assert written is not None and "+new" in (written.diff or "")


def test_merge_keeps_everything_and_turns_asks_into_allows() -> None:
    existing = {"model": "p/m", "provider": {"p": {"options": {"baseURL": "u"}}},
                "permission": {"bash": {"git *": "ask", "rm *": "deny"}, "read": "ask",
                               "webfetch": "deny"}}
    merged = merge_config(existing)
    assert merged["model"] == "p/m" and merged["provider"] == existing["provider"]
    assert merged["permission"]["bash"] == {"git *": "allow", "rm *": "deny"}
    assert merged["permission"]["webfetch"] == "deny"  # a deny stays a deny
    assert merged["permission"]["edit"] == "allow" and merged["permission"]["read"] == "allow"
    assert merge_config({"permission": "ask"})["permission"] == "allow"
    assert merge_config(merged) == merged  # installing again changes nothing
    with pytest.raises(HookFileError):
        merge_config({"permission": 3})


def test_unreadable_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "opencode.jsonc"
    path.write_text('{// a comment\n"model": "x"}')
    assert targets(tmp_path, False).config == path
    with pytest.raises(HookFileError, match="not plain JSON"):
        read_config(path)


def test_plugin_has_the_url_and_a_deadline_above_the_hold() -> None:
    text = plugin_text("http://pg.example:8420/", 50)
    assert 'const PARKGATE_URL = "http://pg.example:8420";' in text
    assert "const DEADLINE_MS = 75000;" in text
    assert "__" not in text.split("const DEADLINE_MS")[1].split("\n")[0]


def test_install_writes_plugin_and_config(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "opencode.json").write_text(json.dumps({"theme": "dark"}))
    env = {**os.environ, "PARKGATE_DATA_DIR": str(tmp_path / "pg"),
           "PARKGATE_OPENCODE_WAIT_SECONDS": "10"}
    done = subprocess.run([str(PARKGATE), "opencode", "install", "--project", str(project),
                           "--url", "http://127.0.0.1:9"], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    plugin = (project / ".opencode" / "plugin" / "parkgate.js").read_text()
    assert '"http://127.0.0.1:9"' in plugin and "const DEADLINE_MS = 35000;" in plugin
    config = json.loads((project / "opencode.json").read_text())
    assert config["theme"] == "dark" and config["permission"]["bash"] == "allow"
    both = subprocess.run([str(PARKGATE), "opencode", "install", "--project", str(project),
                           "--user"], env=env, capture_output=True, text=True, check=False)
    assert both.returncode == 2 and "exclude each other" in both.stderr + both.stdout
