"""A script next to a source checkout named `parkgate` (the README's clone
folder) imports that folder as a namespace package while an editable install
(setuptools' own finder, as `pip install -e .` writes it) serves the
submodules: parkgate says so in one line instead of a confusing error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from setuptools.command.editable_wheel import _finder_template

import parkgate

SCRIPT = '''
import os, sys
# The editable install's finder (appended to sys.meta_path, as its .pth does),
# and no regular `parkgate` package elsewhere on the path.
sys.path[:] = [p for p in sys.path
               if not os.path.isfile(os.path.join(p or ".", "parkgate", "__init__.py"))]
sys.path.insert(1, {site!r})
import __editable___parkgate_finder
__editable___parkgate_finder.install()
from parkgate.agent_client import ParkgateClient
'''


def test_a_folder_named_parkgate_is_named_in_one_line(tmp_path: Path) -> None:
    clone = tmp_path / "parkgate"
    (clone / "docs").mkdir(parents=True)  # a checkout: folders, no __init__.py at its top
    site = tmp_path / "site"
    site.mkdir()
    source = Path(parkgate.__file__).resolve().parent
    (site / "__editable___parkgate_finder.py").write_text(
        _finder_template("__editable___parkgate_finder", {"parkgate": str(source)}, {}))
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT.format(site=str(site)))
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("parkgate._shadowing.ShadowedError: parkgate: `import parkgate` "
                           f"found the folder {clone} "), run.stderr
    assert "rename that folder" in last
