"""Run a few lines of parkgate as an unprivileged user (uid 65534), the way a
non-root worker runs: from an installation that user can read.

The test's own checkout and virtualenv may sit where uid 65534 cannot go (a
clone inside a `mktemp -d` directory is 0700), so the child gets a
world-readable copy of the packages the code imports (parkgate and its
third-party imports, found by importing them once as this user) and runs on
the base interpreter, with nothing of the checkout on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOBODY = "65534"

# Prints {top-level name: file} for every module `imports` loads from outside
# the standard library (site-packages, the editable install's link tree).
_LIST_MODULES = """
import json, sys, sysconfig
before = set(sys.modules)
exec(sys.argv[1])
stdlib = sysconfig.get_paths()["stdlib"] + "/"
found = {}
for name in set(sys.modules) - before:
    top = name.partition(".")[0]
    module = sys.modules.get(top)
    path = getattr(module, "__file__", None)
    if path and not path.startswith(stdlib):
        found[top] = path
print(json.dumps(found))
"""


def _copy_modules(imports: str, target: Path) -> None:
    listed = subprocess.run([sys.executable, "-c", _LIST_MODULES, imports],
                            capture_output=True, text=True, check=True, timeout=120)
    for name, file in json.loads(listed.stdout).items():
        source = Path(file)
        if source.name == "__init__.py":
            shutil.copytree(source.parent, target / name, symlinks=False,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target / source.name)


@contextmanager
def readable_installation(imports: str) -> Iterator[Path]:
    """A world-readable directory holding what `imports` needs (removed afterwards)."""
    root = Path(tempfile.mkdtemp(prefix="parkgate-unprivileged-"))
    try:
        _copy_modules(imports, root)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_unprivileged(imports: str, code: str) -> subprocess.CompletedProcess[str]:
    """`imports` then `code` as uid/gid 65534 under `setpriv` (the caller must be root)."""
    with readable_installation(imports) as root:
        return subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
             getattr(sys, "_base_executable", sys.executable), "-s", "-c",
             f"{imports}\n{code}"],
            capture_output=True, text=True, timeout=60, cwd=root, check=False,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(root),
                 "PYTHONDONTWRITEBYTECODE": "1"},
        )
