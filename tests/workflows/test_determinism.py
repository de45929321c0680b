"""The workflow modules are deterministic on every path, checked statically.

Temporal replays a workflow's code against its history, so that code must do
the same thing every time: no clock, randomness, I/O or threads of its own,
and no state shared between runs. The sandbox checks this at run time, on
the paths a run takes; a worker with `workflow_sandbox = false` runs without
it (docs/PERFORMANCE.md, "Third round"). This test reads the source of every
workflow module and holds all of its code, executed or not, to rules that
make the sandbox's checks redundant for it:

- imports only from modules known to be deterministic (parkgate's own modules
  are passed through the sandbox anyway: they run unchecked in both modes);
- no call that reads the clock, randomness, the environment or the disk, and
  no builtin that reaches outside (`open`, `exec`, `__import__`...);
- no mutable state at module or class level (a run must not see another's).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import parkgate.workflows

WORKFLOW_DIR = Path(parkgate.workflows.__file__).parent
MODULES = sorted(p for p in WORKFLOW_DIR.glob("*.py"))

#: Modules a workflow module may import (exactly, or the prefixes ending in ".").
ALLOWED_IMPORTS = (
    "__future__", "asyncio", "collections.abc", "datetime", "posixpath", "typing",
    "temporalio", "temporalio.common", "temporalio.exceptions", "temporalio.workflow",
    "parkgate.",
)
#: Names those modules must not be used for: `module.attr` (or a bare name
#: imported from the module).
FORBIDDEN_ATTRIBUTES = {
    "datetime": {"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"},
    # The workflow's event loop is Temporal's (timers, deterministic order);
    # these leave it for threads or another loop.
    "asyncio": {"new_event_loop", "run", "to_thread", "run_coroutine_threadsafe"},
}
FORBIDDEN_BUILTINS = {"open", "exec", "eval", "compile", "__import__", "input", "breakpoint",
                      "globals", "id", "hash"}
#: Calls that build mutable values (a module or class attribute must not hold one).
MUTABLE_CALLS = {"list", "dict", "set", "bytearray", "defaultdict", "deque", "OrderedDict",
                 "Counter"}


def _allowed(module: str) -> bool:
    return any(module == a or (a.endswith(".") and module.startswith(a))
               for a in ALLOWED_IMPORTS)


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, ast.List | ast.Dict | ast.Set | ast.ListComp | ast.DictComp
                  | ast.SetComp):
        return True
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in MUTABLE_CALLS)


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    imported_from: dict[str, str] = {}  # local name -> module it came from
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _allowed(alias.name):
                    found.append(f"{where}: imports {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = "parkgate.workflows." + module
            if not _allowed(module):
                found.append(f"{where}: imports from {module}")
            for alias in node.names:
                imported_from[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = imported_from.get(node.value.id, node.value.id).rsplit(".", 1)[-1]
            if node.attr in FORBIDDEN_ATTRIBUTES.get(base, set()):
                found.append(f"{where}: uses {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS:
            found.append(f"{where}: uses {node.id}")
    # Module- and class-level state.
    scopes: list[list[ast.stmt]] = [tree.body]
    scopes += [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for body in scopes:
        for stmt in body:
            value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
            names = [t.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
                     if isinstance(t, ast.Name)]
            if _mutable(value) and names != ["__all__"]:
                found.append(f"{path.name}:{stmt.lineno}: mutable state shared by every run")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_workflow_module_is_deterministic(path: Path) -> None:
    assert _problems(path) == []


def test_the_check_finds_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\n"
        "from datetime import datetime\n"
        "import asyncio\n"
        "CACHE = {}\n"
        "class W:\n"
        "    seen = []\n"
        "    def run(self):\n"
        "        open('x')\n"
        "        asyncio.to_thread(print)\n"
        "        return datetime.now()\n"
    )
    assert sorted(_problems(bad)) == sorted([
        "bad.py:1: imports os",
        "bad.py:4: mutable state shared by every run",
        "bad.py:6: mutable state shared by every run",
        "bad.py:8: uses open",
        "bad.py:9: uses asyncio.to_thread",
        "bad.py:10: uses datetime.now",
    ])
    assert MODULES and all(p.parent == WORKFLOW_DIR for p in MODULES)
