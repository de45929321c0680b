"""Property-based attacks on the real classify/execute pipeline (no Temporal,
no HTTP): arbitrary tool inputs, hostile paths against a workspace with
symlinks pointing out, shell commands full of control characters, and huge
outputs. classify never raises, nothing escapes the workspace, and what the
model sees is bounded while the full output is kept."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from parkgate.calls.events import ToolEvent
from parkgate.models import Session, ToolErrorClass, ToolUseBlock
from parkgate.pipeline import Pipeline
from parkgate.registry import ToolRegistry
from parkgate.rules.policy import ConfirmationPolicy
from parkgate.rules.shell_lex import is_control
from parkgate.tools import builtin_tools
from parkgate.truncation import Limits
from parkgate.verdicts import Deny, Execute, NeedsApproval, ToolRun
from tests.faults.harness import summary

SOAK = os.environ.get("PARKGATE_SOAK", "") not in ("", "0", "false")
SECRET = "TOPSECRET-OUTSIDE-THE-WORKSPACE"
PROPS = settings(
    max_examples=1000 if SOAK else 150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A private loop: hypothesis drives sync test bodies, which run coroutines here."""
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture
def arena(tmp_path: Path) -> dict[str, Path]:
    """A workspace with files, a nested dir and symlinks, beside an outside dir
    holding a secret (directly and via links)."""
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    (ws / "sub" / "deeper").mkdir(parents=True)
    outside.mkdir()
    (ws / "a.txt").write_text("inside a\n")
    (ws / "sub" / "b.txt").write_text("inside b\n")
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / f"{SECRET}.name").write_text("x")
    (ws / "link_out").symlink_to(outside)
    (ws / "link_secret").symlink_to(outside / "secret.txt")
    (ws / "sub" / "link_up").symlink_to("../..")
    (ws / "link_in").symlink_to(ws / "sub")
    (ws / "loop1").symlink_to(ws / "loop2")
    (ws / "loop2").symlink_to(ws / "loop1")
    return {"ws": ws.resolve(), "outside": outside.resolve(), "tmp": tmp_path.resolve()}


def auto_pipeline(limits: Limits | None = None) -> Pipeline:
    """Every class auto: classify answers Execute or Deny, so escapes are visible."""
    registry = ToolRegistry()
    for factory in builtin_tools():
        registry.register(factory)
    policy = ConfirmationPolicy.from_mapping(
        {"default": {c: "auto" for c in ("NONE", "READ", "WRITE", "EXECUTE", "NETWORK")}}
    )
    return Pipeline(registry, policy, limits=limits)


def session(ws: Path) -> Session:
    return Session(session_id="hostile", turn_id="t1", workspace_path=str(ws))


def escapes(ws: Path, path: str) -> bool:
    """Independent oracle: does `path` resolve outside `ws` (or is it unusable)?"""
    if "\x00" in path or path == "":
        return True
    try:
        real = os.path.realpath(path if os.path.isabs(path) else os.path.join(ws, path))
    except (OSError, ValueError):
        return True
    return not (real == str(ws) or real.startswith(str(ws) + os.sep))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def run_text(run: ToolRun) -> str:
    return run.result.text


# ----------------------------------------------------------------------------
# Strategies
# ----------------------------------------------------------------------------

PIECES = st.sampled_from([
    "..", ".", "", "a.txt", "sub", "deeper", "b.txt", "link_out", "link_secret", "link_in",
    "link_up", "loop1", "secret.txt", "~", "~root", "%2e%2e", "..\\..", "\u2024\u2024",
    "\uff0e\uff0e", " ", "...", "new.txt", "\u202e", "CON", "a" * 300, "\x00", "\n", "*",
    "$HOME", "`id`",
])
PATHS = st.one_of(
    st.lists(PIECES, min_size=1, max_size=8).map("/".join),
    st.lists(PIECES, min_size=1, max_size=6).map(lambda xs: "/" + "/".join(xs)),
    st.builds(lambda p: "/etc/" + p, PIECES),
    st.text(max_size=60),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
TOOL_NAMES = st.sampled_from(
    ["read_file", "write_file", "patch_file", "list_dir", "shell", "Shell", "read_file ",
     "../shell", "", "x" * 300, "<script>"]
)


# ----------------------------------------------------------------------------
# Properties
# ----------------------------------------------------------------------------


def test_classify_never_raises_on_arbitrary_input(
    arena: dict[str, Path], loop: asyncio.AbstractEventLoop
) -> None:
    pipeline = auto_pipeline()
    sess = session(arena["ws"])

    @PROPS
    @given(name=TOOL_NAMES, tool_input=st.dictionaries(st.text(max_size=12), JSON, max_size=5)
           | st.fixed_dictionaries({"path": JSON, "content": JSON, "command": JSON,
                                    "old": JSON, "new": JSON}))
    def prop(name: str, tool_input: dict[str, Any]) -> None:
        summary.add(bad_inputs_tried=1)
        try:
            call = ToolUseBlock(id="tu_prop", name=name or "x", input=tool_input)
        except ValueError:
            return  # the canonical model refuses it before the pipeline
        verdict = loop.run_until_complete(pipeline.classify(call, sess))
        assert isinstance(verdict, Execute | Deny | NeedsApproval)
        if isinstance(verdict, Deny):
            assert verdict.result.is_error and verdict.result.tool_use_id == "tu_prop"
            assert verdict.result.text
            json.dumps(verdict.result.model_dump(mode="json"))  # serialisable as-is

    prop()


@pytest.mark.parametrize("tool", ["read_file", "list_dir", "write_file", "patch_file"])
def test_paths_never_escape_the_workspace(
    arena: dict[str, Path], loop: asyncio.AbstractEventLoop, tool: str
) -> None:
    pipeline = auto_pipeline()
    ws, outside = arena["ws"], arena["outside"]
    sess = session(ws)
    before_outside = snapshot(outside)

    def block(path: str) -> dict[str, Any]:
        return {
            "read_file": {"path": path},
            "list_dir": {"path": path},
            "write_file": {"path": path, "content": "pwned\n"},
            "patch_file": {"path": path, "old": SECRET, "new": "pwned"},
        }[tool]

    @PROPS
    @given(path=PATHS)
    @example(path="link_out/secret.txt")
    @example(path="link_secret")
    @example(path="sub/link_up/outside/secret.txt")
    @example(path="link_in/link_up/outside")
    @example(path="sub/../../outside/secret.txt")
    @example(path=str(Path("..") / "outside" / "secret.txt"))
    @example(path="loop1")
    @example(path="a.txt\x00/../../outside/secret.txt")
    @example(path="link_out")
    def prop(path: str) -> None:
        summary.add(bad_inputs_tried=1)
        call = ToolUseBlock(id="tu_path", name=tool, input=block(path))
        verdict = loop.run_until_complete(pipeline.classify(call, sess))
        if escapes(ws, path):
            assert isinstance(verdict, Deny), f"{tool} {path!r} escaped: {verdict!r}"[:400]
            assert verdict.error_class in (
                ToolErrorClass.PERMISSION_DENIED, ToolErrorClass.VALIDATION_ERROR
            ), verdict
            return
        if not isinstance(verdict, Execute):
            return
        run = loop.run_until_complete(pipeline.execute(verdict.prepared))
        assert SECRET not in run_text(run), f"{tool} {path!r} leaked the outside secret"

    prop()
    assert snapshot(outside) == before_outside, "a file outside the workspace changed"
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


CONTROL_TEXT = st.lists(
    st.one_of(
        st.characters(min_codepoint=1, max_codepoint=31),
        st.sampled_from(["\x7f", "\x1b[2J", "\x1b]0;t\x07", "\u202e", "\u2028", "\ufeff", "'",
                         '"', "\\", "$", "`", ";", "|", "&", "*"]),
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    ),
    min_size=1,
    max_size=60,
).map("".join)


def test_shell_commands_with_control_characters_run_as_data(
    arena: dict[str, Path], loop: asyncio.AbstractEventLoop
) -> None:
    """A quoted argument of printable characters and tabs reaches the command
    intact and comes back as data, with tool.called / tool.completed emitted.
    One holding a newline or another control character (which /bin/sh reads
    differently from rules and people: issue 28) is refused and runs nothing."""
    pipeline = auto_pipeline()
    sess = session(arena["ws"])

    @settings(PROPS, max_examples=300 if SOAK else 40)
    @given(text=CONTROL_TEXT)
    def prop(text: str) -> None:
        summary.add(bad_inputs_tried=1)
        events: list[ToolEvent] = []

        async def emit(event: ToolEvent) -> None:
            events.append(event)

        call = ToolUseBlock(id="tu_ctl", name="shell",
                            input={"command": f"printf '%s' {shlex.quote(text)}"})
        verdict = loop.run_until_complete(pipeline.classify(call, sess))
        if "\n" in text:
            assert isinstance(verdict, Deny), verdict
            assert verdict.error_class == ToolErrorClass.VALIDATION_ERROR
            assert "multiline commands are rejected" in verdict.result.text
            return
        if any(is_control(c) for c in text):
            assert isinstance(verdict, Deny), verdict
            assert verdict.error_class == ToolErrorClass.VALIDATION_ERROR
            assert "contains the control character U+" in verdict.result.text
            assert not events
            return
        assert isinstance(verdict, Execute), verdict
        run = loop.run_until_complete(pipeline.execute(verdict.prepared, emit=emit))
        assert not run.result.is_error, run.result.text
        assert run.output is not None
        assert run.output.metadata.get("stdout") == text
        assert [e.type for e in events] == ["tool.called", "tool.completed"]

    prop()


@settings(PROPS, max_examples=300 if SOAK else 100)
@given(command=CONTROL_TEXT)
def test_raw_control_character_commands_classify_cleanly(command: str) -> None:
    """Classify only (never run random shell): a verdict, never an exception; NUL is refused."""
    summary.add(bad_inputs_tried=1)
    pipeline = auto_pipeline()
    sess = Session(session_id="hostile", turn_id="t1", workspace_path=os.getcwd())
    for cmd in (command, command + "\x00", "\x00"):
        verdict = asyncio.run(pipeline.classify(
            ToolUseBlock(id="tu_raw", name="shell", input={"command": cmd}), sess))
        assert isinstance(verdict, Execute | Deny | NeedsApproval)
        if "\x00" in cmd:
            assert isinstance(verdict, Deny), f"NUL command accepted: {cmd!r}"
            assert verdict.error_class == ToolErrorClass.VALIDATION_ERROR


def test_huge_outputs_are_truncated_for_the_model_and_kept_whole(
    arena: dict[str, Path], loop: asyncio.AbstractEventLoop
) -> None:
    limits = Limits(text_chars=10_000, file_chars=5_000)
    pipeline = auto_pipeline(limits)
    sess = session(arena["ws"])
    size = 2_000_000
    (arena["ws"] / "big.txt").write_text("c" * size)
    cases = [
        ("shell", {"command": f"head -c {size} /dev/zero | tr '\\0' b"}, "b"),
        ("shell", {"command": f"head -c {size} /dev/zero | tr '\\0' e 1>&2"}, "e"),
        ("read_file", {"path": "big.txt"}, "c"),
    ]
    for name, tool_input, ch in cases:
        summary.add(bad_inputs_tried=1)
        verdict = loop.run_until_complete(
            pipeline.classify(ToolUseBlock(id="tu_big", name=name, input=tool_input), sess))
        assert isinstance(verdict, Execute), verdict
        run = loop.run_until_complete(pipeline.execute(verdict.prepared))
        assert len(run.result.text) <= limits.text_chars + 500, (name, len(run.result.text))
        assert "truncated" in run.result.text, run.result.text[-200:]
        assert run.output is not None
        whole = json.dumps(run.output.model_dump(mode="json"))
        assert whole.count(ch * 1000) >= size // 1000 - 1, f"{name}: full output not kept"
