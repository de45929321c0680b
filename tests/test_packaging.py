"""The installed names: everything lives under `parkgate`, nothing collides.

The folders stay where the layout puts them (`dispatcher/`, `workflows/`,
`activities/`, `migrations/`); setuptools' package-dir installs them as
`parkgate`, `parkgate.workflows`, `parkgate.activities`, `parkgate.migrations`.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import parkgate

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"parkgate": "dispatcher", "parkgate.workflows": "workflows",
           "parkgate.activities": "activities", "parkgate.migrations": "migrations"}
LEGACY = ("dispatcher", "workflows", "activities", "migrations")


def _declared() -> tuple[set[str], dict[str, str]]:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(tool["packages"]), tool["package-dir"]


def _source_packages() -> set[str]:
    """Folders holding Python modules or package data (templates, static files)."""
    found = set()
    for name, folder in FOLDERS.items():
        base = ROOT / folder
        for path in base.rglob("*"):
            if path.suffix not in {".py", ".html", ".css", ".js", ".ini", ".mako"}:
                continue
            rel = path.parent.relative_to(base).parts
            if "__pycache__" in rel:
                continue
            full = ".".join((name, *rel))
            # A folder mapped on its own (workflows/ under parkgate) is named once.
            if name == "parkgate" and rel and f"parkgate.{rel[0]}" in FOLDERS:
                continue
            found.add(full)
    return found


def test_every_source_package_is_installed() -> None:
    packages, package_dir = _declared()
    assert package_dir == FOLDERS
    assert _source_packages() == packages


def test_the_wheel_holds_only_the_parkgate_namespace(tmp_path: Path) -> None:
    # Build from a copy: an in-tree build would write build/ beside the sources.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    (wheel,) = tmp_path.glob("parkgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"parkgate", wheel.name.split("-py3")[0] + ".dist-info"}, tops
    for expected in ("parkgate/workflows/call.py", "parkgate/activities/execute.py",
                     "parkgate/migrations/env.py", "parkgate/migrations/alembic.ini",
                     "parkgate/api/shared/templates/approve.html", "parkgate/py.typed",
                     "parkgate/dialects/opencode_plugin.js"):
        assert expected in names, expected
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "parkgate = parkgate.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_no_module_is_imported_under_a_bare_folder_name() -> None:
    for info in pkgutil.walk_packages(parkgate.__path__, "parkgate."):
        if info.name.startswith("parkgate.migrations.versions") or info.name.endswith(
            ("__main__", "migrations.env")
        ):
            continue
        importlib.import_module(info.name)
    stray = sorted(m for m in sys.modules if m.split(".", 1)[0] in LEGACY)
    assert stray == []
