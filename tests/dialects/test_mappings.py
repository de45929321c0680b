"""Each dialect's events and answers, without a server: what parkgate reads
from an agent's hook event, what it answers, and what it refuses to read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from parkgate import dialects
from parkgate.dialects import EventError, agent_preview
from parkgate.dialects.codex import CODEX, patch_of
from parkgate.dialects.gemini import GEMINI

PATCH = """*** Begin Patch
*** Add File: notes/new.txt
+hello
*** Update File: src/app.py
@@
-old
+new
*** End Patch
"""


def codex_event(**fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": "019a-sess", "cwd": "/w",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "call_1",
            "turn_id": "turn-1", "model": "m", "permission_mode": "default",
            "transcript_path": None, **fields}


def test_registry_names_codex_and_gemini() -> None:
    assert {"codex", "gemini"} <= set(dialects.names())
    assert dialects.get("codex") is CODEX and CODEX.path == "/v1/hooks/codex"


def test_codex_pre_tool_use_is_a_call_with_its_id_and_turn() -> None:
    call = CODEX.parse(codex_event())
    assert (call.kind, call.session_id, call.tool_name, call.call_id, call.turn_id) == (
        "pre", "019a-sess", "Bash", "call_1", "turn-1")
    assert call.tool_input == {"command": "ls"}


def test_codex_post_tool_use_carries_the_output() -> None:
    call = CODEX.parse(codex_event(hook_event_name="PostToolUse", tool_response="total 0"))
    assert call.kind == "post" and CODEX.response_text(call.response) == "total 0"


@pytest.mark.parametrize(("body", "says"), [
    ([], "JSON object"),
    ({"hook_event_name": "Nope", "session_id": "s"}, "not a Codex event"),
    (codex_event(session_id=""), "session_id"),
    (codex_event(session_id="a b"), "session_id"),
    (codex_event(tool_use_id=None), "tool_use_id"),
    (codex_event(tool_name=""), "tool_name"),
    (codex_event(tool_input=["ls"]), "tool_input"),
    (codex_event(cwd=3), "cwd"),
])
def test_codex_malformed_events_say_what_is_wrong(body: Any, says: str) -> None:
    with pytest.raises(EventError, match=says):
        CODEX.parse(body)


def test_codex_answers() -> None:
    assert CODEX.allow("parkgate: allowed") == {}  # no decision: Codex runs it
    edited = CODEX.allow("parkgate: approved with edits", {"command": "ls -l"})
    assert edited["hookSpecificOutput"]["updatedInput"] == {"command": "ls -l"}
    deny = CODEX.deny("parkgate: no")
    assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert CODEX.deny("  ")["hookSpecificOutput"]["permissionDecisionReason"]  # never empty
    for body in ({}, edited, deny):
        assert CODEX.is_decision(body)
    for body in (None, [], {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                                   "permissionDecision": "ask"}},
                 {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                         "permissionDecision": "deny",
                                         "permissionDecisionReason": ""}}):
        assert not CODEX.is_decision(body)


def test_waiting_names_the_inbox_and_says_call_again() -> None:
    for dialect in (CODEX, GEMINI):
        answer = dialect.waiting("http://pg/inbox (request r-1)")
        assert dialect.is_deny(answer)
        text = str(answer)
        assert "waiting for a human approval (http://pg/inbox (request r-1))" in text
        assert "call the tool again" in text.lower()


def test_codex_apply_patch_files_views_and_diff() -> None:
    patch = patch_of({"command": PATCH})
    assert patch is not None and patch.files == [("create", "notes/new.txt"),
                                                 ("modify", "src/app.py")]
    assert CODEX.views("apply_patch", {"input": PATCH}) == [
        ("Write", {"file_path": "notes/new.txt"}), ("Write", {"file_path": "src/app.py"})]
    shown = CODEX.preview("apply_patch", {"command": PATCH}, "/w")
    assert shown is not None and shown.files == ["notes/new.txt", "src/app.py"]
    assert shown.diff == PATCH and shown.projected_impact[0] == "will create notes/new.txt"
    assert agent_preview("apply_patch", {"command": PATCH}, "/w") == shown
    assert CODEX.views("Bash", {"command": "cat /etc/passwd"}) == [
        ("Bash", {"command": "cat /etc/passwd"})]


def test_gemini_has_no_call_id_and_reads_failures() -> None:
    base = {"session_id": "g-1", "cwd": "/w", "tool_name": "run_shell_command",
            "tool_input": {"command": "ls"}, "transcript_path": "", "timestamp": "t"}
    pre = GEMINI.parse({**base, "hook_event_name": "BeforeTool"})
    assert pre.kind == "pre" and pre.call_id is None
    ok = GEMINI.parse({**base, "hook_event_name": "AfterTool",
                       "tool_response": {"llmContent": "a.txt", "returnDisplay": "a.txt"}})
    assert ok.kind == "post" and GEMINI.response_text(ok.response) == "a.txt"
    bad = GEMINI.parse({**base, "hook_event_name": "AfterTool", "tool_response": {
        "llmContent": "x", "error": {"type": "execution_failed", "message": "exit 1"}}})
    assert bad.kind == "failure" and bad.error == "exit 1"


def test_gemini_answers() -> None:
    assert GEMINI.allow("ok") == {"decision": "allow", "reason": "ok"}
    edited = GEMINI.allow("edited", {"content": "x"})
    assert edited["hookSpecificOutput"]["tool_input"] == {"content": "x"}
    assert GEMINI.deny("no") == {"decision": "deny", "reason": "no"}
    assert GEMINI.is_decision(edited) and GEMINI.is_decision(GEMINI.deny("no"))
    assert not GEMINI.is_decision({}) and not GEMINI.is_decision({"decision": "ask"})
    assert not GEMINI.is_decision({"decision": "deny", "reason": ""})


def test_gemini_file_tools_diff_against_the_disk(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    shown = GEMINI.preview("replace", {"file_path": "a.txt", "old_string": "two",
                                       "new_string": "2"}, str(tmp_path))
    assert shown is not None and "-two" in (shown.diff or "") and "+2" in (shown.diff or "")
    made = GEMINI.preview("write_file", {"file_path": str(tmp_path / "b.txt"),
                                         "content": "new\n"}, str(tmp_path))
    assert made is not None and made.projected_impact == ["will create b.txt"]
    assert GEMINI.views("write_file", {"file_path": "a.txt"}) == [
        ("Write", {"file_path": "a.txt"})]
    assert GEMINI.views("run_shell_command", {"command": "ls", "dir_path": "/etc"}) == [
        ("Bash", {"command": "ls"}), ("LS", {"path": "/etc"})]


def test_the_registry_is_standard_library_only() -> None:
    """The command hook imports it on every tool call."""
    import subprocess
    import sys

    code = ("import sys, parkgate.dialects; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'fastapi', 'sqlalchemy', 'temporalio', 'httpx')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_codex_a_patch_through_the_shell_shows_its_files() -> None:
    """Codex sends a patch as `Bash` with `apply_patch <<'EOF' ... EOF`."""
    command = "apply_patch <<'EOF'\n" + PATCH + "EOF\n"
    views = CODEX.views("Bash", {"command": command})
    assert views[:2] == [("Write", {"file_path": "notes/new.txt"}),
                         ("Write", {"file_path": "src/app.py"})]
    assert views[2] == ("Bash", {"command": command})
    shown = CODEX.preview("Bash", {"command": command}, "/w")
    assert shown is not None and shown.files == ["notes/new.txt", "src/app.py"]
    assert CODEX.preview("Bash", {"command": "ls"}, "/w") is None


def test_gemini_read_many_files_is_read_as_its_paths_and_patterns() -> None:
    """Each `include` (or older `paths`) entry as a Read or a Glob, brace
    alternatives expanded as Gemini's glob library does; too many: as /."""
    from parkgate.dialects.gemini import GEMINI, braces
    assert braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert braces("{x}") == ["{x}"] and braces("{a,b}" * 8) is None
    assert GEMINI.views("read_many_files", {"include": ["a.txt", "{/d/s,*.md}"],
                                            "paths": "/x"}) == [
        ("Read", {"file_path": "a.txt"}), ("Read", {"file_path": "/d/s"}),
        ("Glob", {"path": "", "pattern": "*.md"}), ("Read", {"file_path": "/x"})]
    assert GEMINI.views("read_many_files", {"include": ["{a,b}" * 8]}) == [
        ("LS", {"path": "/"})]
