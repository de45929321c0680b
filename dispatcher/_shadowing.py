"""Say so when a folder named `parkgate` shadows the installed package.

A script run next to a source checkout named `parkgate` can import that folder
as a namespace package (it has no `__init__.py`) while an editable install
still serves the submodules: `parkgate` itself is then empty and errors are
confusing. Every module that most imports reach first calls `check()`.
"""

from __future__ import annotations

import sys


class ShadowedError(ImportError):
    """`parkgate` is a folder (namespace package), not the installed package."""


def check() -> None:
    """Raise one line naming the folder when `parkgate` was imported as a namespace."""
    package = sys.modules.get("parkgate")
    if package is None or getattr(package, "__file__", None) is not None:
        return
    folders = [str(p) for p in getattr(package, "__path__", ())]
    where = folders[0] if folders else "a folder named parkgate"
    raise ShadowedError(
        f"parkgate: `import parkgate` found the folder {where} (a namespace package, "
        "e.g. a source checkout named parkgate), not the installed package; run from "
        "another directory or rename that folder"
    )
