"""parkgate.client_tools.confinement: what a Claude Code call's paths reach (pure,
on a temporary tree), including the best-effort reading of Bash commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from parkgate.client_tools.confinement import Protected, command_reach, judge, tool_paths


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path, list[Protected]]:
    root = tmp_path.resolve()
    home, ws = root / "home", root / "home" / "proj"
    data = home / ".parkgate"
    ws.mkdir(parents=True)
    data.mkdir()
    return home, ws, [Protected(str(data), "parkgate's data directory")]


@pytest.mark.parametrize("command", [
    "cat ~/.parkgate/link-secret",
    "cat < $HOME/.parkgate/payload-key",
    "cat \"${HOME}/.parkgate/parkgate.db\"",
    "ls && cat ../.parkgate/link-secret",
    "bash -c 'cat ~/.parkgate/link-secret'",
    "echo $(cat ~/.parkgate/link-secret)",
    "cat ~/.park*/link-*",
    "grep --file=../.parkgate/link-secret .",
    "cp x ~/.parkgate/",
])
def test_a_command_naming_parkgates_files_is_denied(
        tree: tuple[Path, Path, list[Protected]], command: str) -> None:
    home, ws, protected = tree
    found = command_reach(command, cwd=str(ws), home=str(home), protected=protected)
    assert found.denied is not None and "parkgate's data directory" in found.denied, command


@pytest.mark.parametrize("command", ["ls -la", "cat * | wc -l", "ls / /tmp", "cd ~ && ls",
                                     "git status && rm -rf ./build"])
def test_other_commands_are_left_to_policy(
        tree: tuple[Path, Path, list[Protected]], command: str) -> None:
    home, ws, protected = tree
    assert command_reach(command, cwd=str(ws), home=str(home),
                         protected=protected).denied is None, command


def test_file_tools_resolve_against_cwd(tree: tuple[Path, Path, list[Protected]]) -> None:
    home, ws, protected = tree
    (ws / "sub").mkdir()
    (ws / "sub" / "up").symlink_to(home)

    def reach(tool: str, **inp: str) -> tuple[str | None, str | None]:
        paths, patterns = tool_paths(tool, inp, str(ws / "sub"), str(home))
        found = judge(paths, workspace=str(ws), protected=protected, patterns=patterns)
        return found.denied, found.outside

    assert reach("Read", file_path="up/.parkgate/link-secret")[0] is not None
    assert reach("Glob", pattern="../../.parkgate/*")[0] is not None
    assert reach("Grep", pattern="x", path="/")[0] is not None  # holds the data dir
    assert reach("LS", path=str(home)) == (
        f"{home} holds parkgate's data directory ({home / '.parkgate'})", None)
    assert reach("Read", file_path="../a.txt") == (None, None)
    assert reach("Grep", pattern="x") == (None, None)  # the cwd
    elsewhere = str(home.parent / "elsewhere.txt")
    assert reach("Read", file_path=elsewhere) == (None, elsewhere)
