"""parkgate.dialects.claude_code: tool classes, the file tools' diff, settings merge."""

from __future__ import annotations

from pathlib import Path

from parkgate.dialects.claude_code import file_preview, merge_settings, side_effects_for
from parkgate.models import SideEffects


def test_tool_classes() -> None:
    assert side_effects_for("Read", {}) == SideEffects.READ
    assert side_effects_for("Grep", {}) == SideEffects.READ
    assert side_effects_for("MultiEdit", {}) == SideEffects.WRITE
    assert side_effects_for("Bash", {}) == SideEffects.EXECUTE
    assert side_effects_for("WebFetch", {}) == SideEffects.NETWORK
    assert side_effects_for("SomethingNew", {}) == SideEffects.EXECUTE
    assert side_effects_for("mcp__gh__get_issue", {}) == SideEffects.EXECUTE
    known = {"gh__get_issue": SideEffects.READ}.get
    assert side_effects_for("mcp__gh__get_issue", {}, known) == SideEffects.READ
    assert side_effects_for("mcp__gh__get_issue", {"mcp__gh__*": "network"}, known) \
        == SideEffects.NETWORK
    assert side_effects_for("Bash", {"Bash": "write"}) == SideEffects.WRITE


def test_edit_diff_against_the_file_on_disk(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_text("x = 1\ny = 2\n")
    shown = file_preview("Edit", {"file_path": str(f), "old_string": "y = 2",
                                  "new_string": "y = 3"}, str(tmp_path))
    assert shown is not None and shown.files == ["a.py"]
    assert "-y = 2" in (shown.diff or "") and "+y = 3" in (shown.diff or "")
    multi = file_preview("MultiEdit", {"file_path": str(f), "edits": [
        {"old_string": "x = 1", "new_string": "x = 0"}]}, str(tmp_path))
    assert multi is not None and "+x = 0" in (multi.diff or "")
    new = file_preview("Write", {"file_path": str(tmp_path / "b.txt"), "content": "hi\n"},
                       str(tmp_path))
    assert new is not None and new.projected_impact == ["will create b.txt"]
    assert file_preview("Read", {"file_path": str(f)}, str(tmp_path)) is None


def test_merge_keeps_other_hooks_and_replaces_ours() -> None:
    theirs = {"model": "x", "hooks": {"PreToolUse": [
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint.sh"}]}]}}
    once = merge_settings(theirs, "http://pg:8420", command=False, wait_seconds=50,
                          fail_closed=True)
    twice = merge_settings(once, "http://pg:8420", command=False, wait_seconds=50,
                           fail_closed=True)
    assert once == twice and once["model"] == "x"
    pre = once["hooks"]["PreToolUse"]
    assert pre[0]["hooks"][0]["command"] == "lint.sh"
    ours = pre[1]["hooks"][0]
    assert ours["url"] == "http://pg:8420/v1/hooks/claude-code"
    assert ours["onFailure"] == "block" and ours["allowedEnvVars"] == ["PARKGATE_API_KEY"]
    assert ours["headers"]["Authorization"] == "Bearer $PARKGATE_API_KEY"
    assert "onFailure" not in once["hooks"]["PostToolUse"][0]["hooks"][0]
    prompt_hook = once["hooks"]["UserPromptSubmit"][0]["hooks"][0]  # the turn's prompt
    assert prompt_hook["url"] == ours["url"] and "onFailure" not in prompt_hook


def test_lease_covers_the_run_claude_code_may_make() -> None:
    from parkgate.dialects.claude_code import lease_seconds

    assert lease_seconds("Read", {}, 300, 3600) == 300
    assert lease_seconds("Bash", {"command": "make"}, 300, 3600) == 660
    assert lease_seconds("Bash", {"command": "make", "timeout": 30_000}, 300, 3600) == 300
    assert lease_seconds("Bash", {"command": "make", "timeout": 500_000}, 300, 3600) == 560
    assert lease_seconds("Task", {}, 300, 3600) == 3600
    assert lease_seconds("Bash", {"command": "make"}, 300, 400) == 400


def test_parkgates_own_files_are_never_read_into_a_diff(tmp_path: Path) -> None:
    """An agent's Edit of parkgate's link secret must not put the secret in the
    approval page (or Slack, or e-mail) through the diff."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "link-secret").write_text("s3cret-link-key\n")
    for tool, extra in (("Write", {"content": "x"}),
                        ("Edit", {"old_string": "s3cret", "new_string": "x"})):
        shown = file_preview(tool, {"file_path": str(data / "link-secret"), **extra},
                             str(tmp_path / "ws"), [str(data)])
        assert shown is not None and not shown.diff
        assert "s3cret" not in " ".join(shown.projected_impact)
        assert "not shown" in shown.projected_impact[0]
