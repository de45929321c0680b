"""docs/ARCHITECTURE.md names every package of the house (issue 41 item 6).

A package added without a word in the architecture page is a room nobody can
find: this test fails until the page says what it owns.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
#: Source folder -> the installed package name it holds (pyproject's package-dir).
FOLDERS = {"dispatcher": "parkgate", "workflows": "parkgate.workflows",
           "activities": "parkgate.activities"}


def packages() -> list[str]:
    """Every installed package name of the source tree."""
    found: list[str] = []
    for folder, installed in FOLDERS.items():
        base = ROOT / folder
        for init in sorted(base.rglob("__init__.py")):
            parts = init.parent.relative_to(base).parts
            if "__pycache__" in parts:
                continue
            found.append(".".join((installed, *parts)))
    return found


def named(text: str, package: str) -> bool:
    """The page names `package` as a dotted name or as its folder (`api/agents/v1/`)."""
    folder = package.removeprefix("parkgate.").replace(".", "/") + "/"
    return f"`{package}" in text or package in text or folder in text


def test_every_package_is_described() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [p for p in packages() if p != "parkgate" and not named(text, p)]
    assert not missing, f"docs/ARCHITECTURE.md does not name: {', '.join(missing)}"


def test_the_check_sees_the_tree() -> None:
    # The walk itself finds the packages the page is held to.
    found = packages()
    assert {"parkgate.api", "parkgate.workflows", "parkgate.activities",
            "parkgate.store", "parkgate.dialects"} <= set(found)
    assert not named("nothing here", "parkgate.store")
