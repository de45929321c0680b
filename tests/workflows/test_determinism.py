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

The parkgate modules workflows import (the sandbox passes them through, so
they run unchecked) are held to one rule: no process-global state that
changes (a module-level container written after import, or `global`); a
worker's keys are such state, and code Temporal replays must not read them
(issue 37: a worker with other keys would replay other commands). The two
known ones are listed in PROCESS_STATE with why they are safe, and the key
readers may be called from workflow code only in update validators (which do
not replay) or the LEGACY branches listed in LEGACY_KEY_READS.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import parkgate.workflows

WORKFLOW_DIR = Path(parkgate.workflows.__file__).parent
MODULES = sorted(p for p in WORKFLOW_DIR.glob("*.py"))

#: Modules a workflow module may import (exactly, or the prefixes ending in ".").
#: parkgate's own are held to their own rule below (imported_modules: no
#: process-global state that changes, the keys read only where no replay runs).
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
#: Process-global state that changes, in modules workflows import: (module,
#: name) -> why replayed code cannot see it change.
PROCESS_STATE = {
    ("parkgate.durable.workflow_defn", "_validated"):
        "a cache of each workflow class's shape, written and read when the class "
        "is defined (not in replayed code); the same in every process",
    ("parkgate.approvals.proof", "_installed"):
        "the worker's proof keys: read through KEY_READERS only, which workflow "
        "code calls in update validators or the LEGACY_KEY_READS branches",
}
#: The functions of parkgate.approvals.proof that read the installed keys.
KEY_READERS = {"problem", "installed_ids"}
#: Workflow functions that read the keys outside validators, in a LEGACY branch
#: (histories from before issue 37 replay with the keys they ran under): (file,
#: function) -> the name the guarding `if` tests: only new runs skip those branches.
LEGACY_KEY_READS = {
    # histories from before the patch decide-signal-retired-v1
    ("call_decide.py", "decide_signal"): "decide_signals_retired",
    # histories whose classify result has no claim_checked
    ("client_exec.py", "_claim_at_release"): "claim_checked",
    # histories from before the patch late-outcome-proof-in-activity-v1
    ("late_outcome.py", "run"): "checked_there",
    # sub-call approvals that took a decide signal before decide-signal-retired-v1
    ("subcall_park.py", "decide_signal"): "_decide_signals_retired",
}
#: Decorators of the functions Temporal calls (`workflow.update(...)`, `x.validator`).
HANDLER_DECORATORS = {"run", "update", "signal", "query", "validator"}
#: Methods that mutate a container in place.
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
            "remove", "discard", "clear", "__setitem__"}
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


# ------------------------------------------- parkgate modules workflows import
def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _runtime_imports(path: Path, name: str) -> set[str]:
    """The parkgate modules `path` imports when it runs (not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                   for n in ast.walk(block)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names
                      if _module_file(f"{module}.{a.name}") is not None}
    return {m for m in found if m == "parkgate" or m.startswith("parkgate.")}


def imported_modules() -> dict[str, Path]:
    """Every parkgate module (not a workflow module) the workflow modules import,
    transitively, with its parent packages."""
    todo = [f"parkgate.workflows.{p.stem}" for p in MODULES]
    seen: dict[str, Path | None] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = seen[name] = _module_file(name)
        if path is None:
            continue
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += _runtime_imports(path, name)
    return {n: p for n, p in seen.items()
            if p is not None and p.parent != WORKFLOW_DIR}


def _changing_state(path: Path) -> set[str]:
    """Module-level names whose value changes after import: `global` ones, and
    mutable containers written in place (item assignment, a mutating method)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    containers = {t.id for stmt in tree.body if isinstance(stmt, ast.Assign | ast.AnnAssign)
                  and _mutable(stmt.value)
                  for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
                  if isinstance(t, ast.Name)}
    changing: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            changing |= set(node.names)
        target = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS:
            target = node.func.value
        if isinstance(target, ast.Name) and target.id in containers:
            changing.add(target.id)
    return changing


def _state_problems(modules: dict[str, Path]) -> list[str]:
    return [f"{name}.{var}: process-global state that changes"
            for name, path in sorted(modules.items())
            for var in sorted(_changing_state(path)) if (name, var) not in PROCESS_STATE]


def test_imported_modules_hold_no_changing_state() -> None:
    modules = imported_modules()
    assert "parkgate.approvals.proof" in modules and "parkgate.models" in modules
    assert _state_problems(modules) == []


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _guarded(fn: Function, guard: str | None) -> set[int]:
    """Ids of the nodes under an `if` whose test names `guard`."""
    if guard is None:
        return set()
    ids: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and any(
                (isinstance(n, ast.Name) and n.id == guard)
                or (isinstance(n, ast.Attribute) and n.attr == guard)
                for n in ast.walk(node.test)):
            ids |= {id(n) for stmt in [*node.body, *node.orelse] for n in ast.walk(stmt)}
    return ids


def _key_reads(sources: dict[str, str]) -> list[str]:
    """Key reads reachable from workflow code that replays: every call of a key
    reader, followed through `self.<method>()`, `self.<part>.<method>()` (a
    part of ToolCallWorkflow, handed the call's state) and the workflow
    modules' own functions (`proof_problem()`) from each handler, run or
    validator, is in an update validator or under its LEGACY guard. A function
    is known by its name alone: every function of that name is followed."""
    functions: dict[str, list[tuple[str, Function]]] = {}
    for file, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, Function):
                functions.setdefault(node.name, []).append((file, node))

    def called(call: ast.AST, base: str) -> str | None:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
            return None
        owner = call.func.value
        if isinstance(owner, ast.Attribute) and base == "self":
            owner = owner.value  # self.<part>.<method>()
        if isinstance(owner, ast.Name) and owner.id == base:
            return call.func.attr
        return None

    def follows(call: ast.AST) -> str | None:
        """The function a call reaches: a method of self or of one of its parts,
        or a function of a workflow module called by its bare name."""
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
            return call.func.id if call.func.id in functions else None
        return called(call, "self")

    helpers = {follows(c) for defs in functions.values() for _, fn in defs
               for c in ast.walk(fn)} - {None}
    found: list[str] = []

    def visit(file: str, fn: Function, safe: bool, stack: tuple[str, ...],
              path: tuple[int, ...]) -> None:
        safe = safe or any(isinstance(d, ast.Attribute) and d.attr == "validator"
                           for d in fn.decorator_list)
        guarded = _guarded(fn, LEGACY_KEY_READS.get((file, fn.name)))
        for node in ast.walk(fn):
            ok = safe or id(node) in guarded
            if called(node, "proof") in KEY_READERS and not ok:
                found.append(f"{file}:{node.lineno}: {' > '.join(stack)} reads the "
                             "worker's keys in replayed code")
            method = follows(node)
            # A handler and the part it hands its input to may share a name:
            # the functions on the path, not their names, end a recursion.
            for f, callee in functions.get(method or "", []):
                if id(callee) not in path:
                    visit(f, callee, ok, (*stack, method or ""), (*path, id(callee)))

    def handler(fn: Function) -> bool:
        """A workflow's run, handler or validator: Temporal calls it, whatever
        else shares its name (the part a handler hands its input to)."""
        for d in fn.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            if isinstance(target, ast.Attribute) and target.attr in HANDLER_DECORATORS:
                return True
        return False

    for name, defs in sorted(functions.items()):
        for file, fn in defs:
            if name not in helpers or handler(fn):
                visit(file, fn, False, (name,), (id(fn),))
    return sorted(set(found))


def test_replayed_code_never_reads_the_keys() -> None:
    sources = {p.name: p.read_text() for p in MODULES}
    assert _key_reads(sources) == []
    planted = ("class W:\n"
               "    async def run(self):\n"
               "        self._check(1)\n"
               "    @x.validator\n"
               "    def _ok(self, i):\n"
               "        self._check(i)\n"
               "    def _check(self, i):\n"
               "        proof.problem(i, 'k', 'w')\n")
    assert _key_reads({**sources, "bad.py": planted}) == [
        "bad.py:8: run > _check reads the worker's keys in replayed code"]
    # Through a part: a handler hands its input to a method of the same name.
    parted = ("class W:\n"
              "    @workflow.update(name='take')\n"
              "    async def take(self, i):\n"
              "        await self._part.take(i)\n"
              "    @take.validator\n"
              "    def _ok(self, i):\n"
              "        self._part.check(i)\n"
              "class Part:\n"
              "    async def take(self, i):\n"
              "        self.check(i)\n"
              "    def check(self, i):\n"
              "        proof.problem(i, 'k', 'w')\n")
    assert _key_reads({**sources, "bad.py": parted}) == [
        "bad.py:12: take > take > check reads the worker's keys in replayed code"]


def test_the_state_check_finds_what_it_forbids(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("TABLE = {'a': 1}\nSEEN = {}\nN = 0\n"
                   "def note(k):\n    global N\n    N += 1\n    SEEN[k] = True\n"
                   "    return TABLE[k]\n")
    assert _changing_state(bad) == {"SEEN", "N"}
    assert _state_problems({"parkgate.approvals.proof": Path(
        importlib.util.find_spec("parkgate.approvals.proof").origin or "")}) == []
