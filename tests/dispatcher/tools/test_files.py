"""Built-in file tools through the pipeline: results, truncation, side-effect records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parkgate import (
    ConfirmationPolicy,
    Execute,
    Limits,
    Pipeline,
    Session,
    ToolErrorClass,
    ToolRegistry,
    ToolRun,
    ToolUseBlock,
    builtin_tools,
)


async def run(session: Session, name: str, limits: Limits | None = None, **input: Any) -> ToolRun:
    registry = ToolRegistry()
    for f in builtin_tools():
        registry.register(f)
    p = Pipeline(
        registry, ConfirmationPolicy.from_mapping({"default": {"WRITE": "auto"}}), limits=limits
    )
    v = await p.classify(ToolUseBlock(id="t", name=name, input=input), session)
    assert isinstance(v, Execute), v
    return await p.execute(v.prepared)


async def test_read_file_truncates_at_file_limit(session: Session, workspace: Path) -> None:
    (workspace / "big.txt").write_text("z" * 20_000)
    r = await run(session, "read_file", path="big.txt")
    assert r.result.text == "z" * 12_000 + "\n[truncated: 8000 more characters]"
    assert r.output is not None and len(r.output.metadata["content"]) == 20_000


async def test_read_missing_file_is_an_error_result(session: Session) -> None:
    r = await run(session, "read_file", path="missing.md")
    assert r.result.is_error and r.error_class == ToolErrorClass.EXECUTION_ERROR
    assert r.result.text == "File not found: missing.md"


async def test_list_dir_and_truncation(session: Session, workspace: Path) -> None:
    r = await run(session, "list_dir")
    assert r.result.text == "README.md\nsrc/"
    for i in range(10):
        (workspace / f"f{i}").write_text("")
    r = await run(session, "list_dir", Limits(listing_entries=5), path=".")
    lines = r.result.text.splitlines()
    assert len(lines) == 6 and lines[-1] == "[truncated: 7 more entries]"
    assert r.output is not None and r.output.metadata["count"] == 12


async def test_write_and_patch_record_files_modified(session: Session, workspace: Path) -> None:
    r = await run(session, "write_file", path="new/dir/x.py", content="a = 1\n")
    assert r.output is not None and r.output.files_modified == ["new/dir/x.py"]
    assert r.result.text == "Created new/dir/x.py (6 bytes)"
    r = await run(session, "patch_file", path="new/dir/x.py", old="a = 1", new="a = 2")
    assert (workspace / "new/dir/x.py").read_text() == "a = 2\n"
    assert r.output is not None and r.output.files_modified == ["new/dir/x.py"]
    assert "-a = 1\n+a = 2" in r.result.text
    r = await run(session, "patch_file", path="new/dir/x.py", old="nope", new="x")
    assert r.result.is_error and "was not found" in r.result.text
