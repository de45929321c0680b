"""Property tests: an allow rule for `git status` never approves anything else."""

from __future__ import annotations

import atexit
import re
import shlex
import shutil
import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from parkgate import (
    ConfirmationPolicy,
    Deny,
    Pipeline,
    Session,
    ToolRegistry,
    ToolUseBlock,
    builtin_tools,
)
from parkgate.tools import ShellTool

POLICY = ConfirmationPolicy.from_mapping(
    {"rules": [{"tool": "shell", "command": "git status", "mode": "auto"}]}
)
_WORKSPACE = tempfile.mkdtemp(prefix="parkgate-props-")
atexit.register(shutil.rmtree, _WORKSPACE, True)
SESSION = Session(session_id="s", turn_id="t", workspace_path=_WORKSPACE)
_REGISTRY = ToolRegistry()
for _factory in builtin_tools():
    _REGISTRY.register(_factory)
PIPELINE = Pipeline(_REGISTRY, POLICY)

pieces = st.sampled_from(
    [
        "git status",
        "git",
        "status",
        "rm -rf ~",
        " ",
        ";",
        "&&",
        "||",
        "|",
        "&",
        "\n",
        "`",
        "$(",
        ")",
        "<(",
        ">",
        "<",
        "2>&1",
        "'",
        '"',
        "\\",
        "#",
        "$HOME",
        "*",
        "echo",
        "x",
    ]
)
lines = st.lists(pieces, min_size=1, max_size=10).map("".join)


def _naive_segments(line: str) -> list[str]:
    return [s.strip() for s in re.split(r"[;&|\n]", line) if s.strip()]


def _tokens(s: str) -> list[str] | None:
    try:
        return shlex.split(s)
    except ValueError:
        return None


@settings(max_examples=1500, deadline=None)
@given(line=lines)
def test_auto_only_for_pure_git_status(line: str) -> None:
    decision = POLICY.decide(ShellTool.definition, {"command": line}, SESSION)
    if decision.mode != "auto":
        return
    assert decision.rule.startswith("rules[0]")
    for forbidden in ("`", "$(", "<", ">"):
        assert forbidden not in line
    segments = _naive_segments(line)
    assert segments
    for seg in segments:
        assert _tokens(seg) == ["git", "status"], (line, seg)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(["read_file", "write_file", "patch_file", "list_dir", "shell", "nope"]),
    tool_input=st.dictionaries(
        st.sampled_from(["command", "path", "content", "old", "new", "x"]),
        st.sampled_from(["a.txt", "../x", "/etc", "git status", "", "x\x00"]) | st.integers(),
        max_size=4,
    ),
)
async def test_every_verdict_names_its_rule(name: str, tool_input: dict[str, Any]) -> None:
    verdict = await PIPELINE.classify(ToolUseBlock(id="p", name=name, input=tool_input), SESSION)
    if isinstance(verdict, Deny):
        assert verdict.rule and verdict.result.is_error and verdict.result.text
    else:
        assert verdict.prepared.rule
