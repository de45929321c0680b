"""The workflow modules' code objects, read from disk once per process.

The workflow sandbox re-executes `parkgate.workflows.call` (and the part
modules it composes, its package and `parkgate`'s) for every new workflow
run (parkgate.durable.plugin). Each of those imports went through the
standard path finder and `SourceFileLoader.get_code`: a directory lookup,
a stat of the source, a read of the `.pyc` and an unmarshal, per module per
run: a third of a new run's CPU once the class's validation was cached
(parkgate.durable.workflow_defn; docs/PERFORMANCE.md, "Leaner calls").

`install()` puts a finder in front of `sys.meta_path` for those modules
only: the first import it sees finds the module as Python does and reads its
code once; every import (the sandbox's, one per run) gets a fresh module spec
whose loader hands out that same code object. A code object is immutable: each run still
executes the module's code afresh, in the sandbox, with its restricted
imports and builtins, in a new module namespace. Nothing of the sandbox's
protection changes. One thing does, for the better: a workflow file edited
on disk under a running worker no longer reaches new runs while the worker
keeps the class it registered; every run executes the code the worker
loaded.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader
from types import CodeType, ModuleType

#: The modules the sandbox re-executes per run: the workflow package (its
#: modules are never passed through) and `parkgate` itself (the parent package
#: of `parkgate.workflows`, executed again for each run as a parent import).
PREFIXES = ("parkgate.workflows.",)
NAMES = frozenset({"parkgate", "parkgate.workflows"})

#: Path of a module's source -> its code object, as first loaded.
_codes: dict[str, CodeType] = {}
_lock = threading.Lock()


class _CodeCachingLoader(SourceFileLoader):
    """SourceFileLoader that reads and unmarshals a module's code once."""

    def get_code(self, fullname: str) -> CodeType:
        code = _codes.get(self.path)
        if code is None:
            loaded = super().get_code(fullname)
            if loaded is None:  # pragma: no cover - a source file always has code
                raise ImportError(f"no code for {fullname}", name=fullname)
            code = _codes.setdefault(self.path, loaded)
        return code


class _Found:
    """Where a module was found: what a fresh spec needs (the loader is
    stateless past its name and path, so one serves every run)."""

    __slots__ = ("cached", "loader", "locations", "origin")

    def __init__(self, spec: ModuleSpec) -> None:
        assert spec.origin is not None
        self.origin: str = spec.origin
        self.cached = spec.cached
        self.locations = spec.submodule_search_locations
        self.loader = _CodeCachingLoader(spec.name, spec.origin)

    def spec(self, fullname: str) -> ModuleSpec:
        spec = ModuleSpec(fullname, self.loader, origin=self.origin,
                          is_package=self.locations is not None)
        if self.locations is not None:
            spec.submodule_search_locations = list(self.locations)
        spec.cached = self.cached
        spec.has_location = True
        return spec


class WorkflowCodeFinder(MetaPathFinder):
    """Finds parkgate's workflow modules once; their code is read once."""

    def __init__(self) -> None:
        #: By name: a module of this process is always found in the same place
        #: (its parent package's `__path__` does not change).
        self._found: dict[str, _Found | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        found = self._found.get(fullname)
        if found is not None:
            return found.spec(fullname)
        if fullname not in NAMES and not fullname.startswith(PREFIXES):
            return None
        if fullname in self._found:  # found before, not a plain source module
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        # A source module, also when an import hook wraps the standard loader
        # (beartype.claw's, once any package in the process asked for it): the
        # workflow modules are then read by the plain loader, once.
        ours = (spec is not None and isinstance(spec.loader, SourceFileLoader)
                and spec.origin is not None)
        with _lock:
            found = self._found.setdefault(fullname, _Found(spec) if ours and spec else None)
        # The first import reads through the caching loader too, so every run
        # after it (whenever install() came) executes that same code object.
        return found.spec(fullname) if found is not None else spec


def install() -> None:
    """Put the finder first in `sys.meta_path` (once per process)."""
    with _lock:
        if not any(isinstance(f, WorkflowCodeFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, WorkflowCodeFinder())
