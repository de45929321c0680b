"""WorkspaceFileAPI: scoping (.., absolute, symlinks, NUL) and file operations."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parkgate import ToolExecutionError, WorkspaceEscapeError, WorkspaceFileAPI


@pytest.fixture
def files(workspace: Path) -> WorkspaceFileAPI:
    return WorkspaceFileAPI(str(workspace))


@pytest.mark.parametrize(
    "path",
    [
        "../../etc/passwd",
        "subdir/../../../etc/passwd",
        "/etc/passwd",
        "..",
        "src/../..",
        "a\x00b",
        "",
    ],
)
def test_escapes_are_rejected(files: WorkspaceFileAPI, path: str) -> None:
    with pytest.raises(WorkspaceEscapeError):
        files.resolve(path)


def test_escape_message_names_the_path(files: WorkspaceFileAPI) -> None:
    with pytest.raises(WorkspaceEscapeError, match=r"'\.\./\.\./etc/passwd' escapes workspace"):
        files.read("../../etc/passwd")


def test_absolute_path_inside_is_accepted(files: WorkspaceFileAPI, workspace: Path) -> None:
    assert files.read(str(workspace / "README.md")).startswith("# Project Foo")
    assert files.relative(str(workspace)) == "."


def test_dotdot_inside_is_accepted(files: WorkspaceFileAPI) -> None:
    assert files.relative("src/../README.md") == "README.md"


def test_symlinked_file_outside_is_rejected(
    files: WorkspaceFileAPI, workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    (workspace / "link.txt").symlink_to(secret)
    with pytest.raises(WorkspaceEscapeError):
        files.read("link.txt")
    with pytest.raises(WorkspaceEscapeError):
        files.write("link.txt", "overwrite")
    assert secret.read_text() == "s3cret"


def test_symlinked_parent_dir_outside_is_rejected(
    files: WorkspaceFileAPI, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(WorkspaceEscapeError):
        files.write("out/new.txt", "x")
    assert not (outside / "new.txt").exists()


def test_dangling_symlink_to_outside_is_rejected(
    files: WorkspaceFileAPI, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "dangling").symlink_to(tmp_path / "not-yet")
    with pytest.raises(WorkspaceEscapeError):
        files.write("dangling", "x")
    assert not (tmp_path / "not-yet").exists()


def test_symlink_inside_is_fine(files: WorkspaceFileAPI, workspace: Path) -> None:
    (workspace / "alias.md").symlink_to(workspace / "README.md")
    assert files.read("alias.md").startswith("# Project Foo")


def test_workspace_root_itself_a_symlink(tmp_path: Path, workspace: Path) -> None:
    link = tmp_path / "wslink"
    link.symlink_to(workspace, target_is_directory=True)
    api = WorkspaceFileAPI(str(link))
    assert api.read("README.md").startswith("# Project")
    with pytest.raises(WorkspaceEscapeError):
        api.read("../secret")


def test_file_operations(files: WorkspaceFileAPI, workspace: Path) -> None:
    files.write("a/b/c.txt", "one\n")
    files.append("a/b/c.txt", "two\n")
    assert files.read("a/b/c.txt") == "one\ntwo\n"
    files.write_bytes("bin.dat", b"\x00\x01")
    assert files.read_bytes("bin.dat") == b"\x00\x01"
    assert files.exists("a/b/c.txt") and not files.exists("nope")
    assert files.list(".") == ["README.md", "a/", "bin.dat", "src/"]
    files.patch("a/b/c.txt", "two", "three")
    assert (workspace / "a/b/c.txt").read_text() == "one\nthree\n"
    files.delete("a/b/c.txt")
    assert not files.exists("a/b/c.txt")


def test_patch_zero_and_multiple_matches(files: WorkspaceFileAPI) -> None:
    files.write("p.txt", "x x")
    with pytest.raises(ToolExecutionError, match="not found"):
        files.patch("p.txt", "y", "z")
    with pytest.raises(ToolExecutionError, match="occurs 2 times"):
        files.patch("p.txt", "x", "z")
    assert files.read("p.txt") == "x x"


def test_missing_file_is_a_clear_error(files: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError, match=r"File not found: nope\.txt"):
        files.read("nope.txt")
    with pytest.raises(ToolExecutionError, match="not UTF-8"):
        files.write_bytes("b.bin", b"\xff\xfe")
        files.read("b.bin")


def test_cannot_delete_or_overwrite_root(files: WorkspaceFileAPI) -> None:
    with pytest.raises(ToolExecutionError):
        files.delete(".")
    with pytest.raises(ToolExecutionError):
        files.write(".", "x")


# ------------------------------------------------------------------ property tests
_segment = st.sampled_from(
    ["..", ".", "a", "b", "src", "link_out", "link_in", "loop", "", "..."]
) | st.text(
    alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=5,
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    segments = draw(st.lists(_segment, min_size=1, max_size=8))
    path = "/".join(segments)
    if draw(st.booleans()):
        path = "/" + path
    return path


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root + os.sep)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    base = tmp_path_factory.mktemp("prop")
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "src").mkdir()
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (root / "link_out").symlink_to(outside, target_is_directory=True)
    (root / "a" / "link_out").symlink_to("../../outside", target_is_directory=True)
    (root / "link_in").symlink_to(root / "a", target_is_directory=True)
    (root / "a" / "b" / "link_in").symlink_to("..", target_is_directory=True)
    (root / "loop").symlink_to(root / "loop")
    (root / "src" / "up").symlink_to("../..")
    return str(root), str(outside)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=paths())
def test_no_generated_path_escapes_the_root(tree: tuple[str, str], path: str) -> None:
    root, _ = tree
    api = WorkspaceFileAPI(root)
    try:
        resolved = api.resolve(path)
    except WorkspaceEscapeError:
        return
    real_root = os.path.realpath(root)
    # Whatever was accepted really is inside, following every symlink on disk.
    assert _inside(os.path.realpath(resolved), real_root)
    assert _inside(os.path.realpath(os.path.join(root, path)), real_root)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(path=paths(), content=st.text(max_size=20))
def test_writes_never_land_outside(tree: tuple[str, str], path: str, content: str) -> None:
    root, outside = tree
    api = WorkspaceFileAPI(root)
    before = sorted(os.listdir(outside))
    try:
        api.write(path, content)
    except (WorkspaceEscapeError, ToolExecutionError):
        pass
    assert sorted(os.listdir(outside)) == before
    assert Path(outside, "secret").read_text() == "s"


def test_write_through_a_hard_link_is_refused_and_leaves_the_target(
    files: WorkspaceFileAPI, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.link(outside, workspace / "linked.txt")
    for write in (
        lambda: files.write("linked.txt", "owned\n"),
        lambda: files.append("linked.txt", "owned\n"),
        lambda: files.patch("linked.txt", "precious", "owned"),
    ):
        with pytest.raises(WorkspaceEscapeError, match="2 hard links"):
            write()
    assert outside.read_text() == "precious\n"  # not truncated either


def test_read_of_a_hard_link_follows_the_documented_rule(
    files: WorkspaceFileAPI, workspace: Path, tmp_path: Path
) -> None:
    """Reads follow the path rule only (see the module docstring)."""
    outside = tmp_path / "shared.txt"
    outside.write_text("shared\n")
    os.link(outside, workspace / "shared.txt")
    assert files.read("shared.txt") == "shared\n"


def test_single_link_file_is_still_written(files: WorkspaceFileAPI, workspace: Path) -> None:
    files.write("README.md", "new\n")
    assert (workspace / "README.md").read_text() == "new\n"
