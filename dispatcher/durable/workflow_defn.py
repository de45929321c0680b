"""`@workflow.defn` that validates a workflow class once per process, not once per run.

The workflow sandbox re-executes a workflow's module for every new workflow
run (parkgate.durable.plugin; docs/PERFORMANCE.md, "Leaner calls"), and with
it the class's `@workflow.defn`. temporalio's decorator validates the class
each time: `inspect.getmembers` over the class and over every base, each
member checked with `inspect.getmodule`, every `isinstance` through the
sandbox's wrapped builtin. For `ToolCallWorkflow` (then five mixins over
`CallRecording`) that was ~1.5 ms of CPU per call, a third of the whole
per-run import.

`defn(name=...)` is temporalio's decorator wherever the class is defined
outside the sandbox: the worker registering it, a replayer, a test. It
records the shape the SDK validated (run method, signal, query and update
names). Inside the sandbox the module is the same file executed again, so
the class is built from the same source; the definition is then built from
the class's own handler attributes, exactly as
`temporalio.workflow._Definition._apply_to_class` builds it once validation
passed, and only if its shape is the validated one. Anything else (no
validated shape in this process, another shape, a dynamic workflow) goes
through temporalio's decorator, which validates and raises as it always did.

Nothing of the sandbox's protection changes: the module is still re-executed
in the sandbox with its restricted imports; only the SDK's structural checks
of the class, already passed by the identical class, are not repeated.
This module is passed through (parkgate.durable.*): the shapes are the
process's, shared by every run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import temporalio.common
from temporalio import workflow
from temporalio.workflow import _Definition, _UpdateDefinition

ClassType = TypeVar("ClassType", bound=type)


class Shape(NamedTuple):
    """What the SDK's validation saw: the handlers by name."""

    run: str
    signals: frozenset[str | None]
    queries: frozenset[str | None]
    updates: frozenset[str | None]


#: Workflow name -> the shape its class had when temporalio's decorator
#: validated it in this process (outside the sandbox).
_validated: dict[str, Shape] = {}


def _shape(defn: _Definition) -> Shape:
    return Shape(defn.run_fn.__name__, frozenset(defn.signals), frozenset(defn.queries),
                 frozenset(defn.updates))


def defn(*, name: str) -> Callable[[ClassType], ClassType]:
    """`@workflow.defn(name=name)` (sandboxed, no failure types, versioning
    unspecified), validated once per process (see the module's docstring)."""

    def decorator(cls: ClassType) -> ClassType:
        shape = _validated.get(name)
        if shape is not None and workflow.unsafe.in_sandbox():
            try:
                built = definition_of(cls, name)
            except (TypeError, AttributeError, ValueError):
                # An SDK whose private definition no longer fits this builder:
                # its own decorator below is always right, only slower.
                built = None
            if built is not None and _shape(built) == shape:
                setattr(cls, "__temporal_workflow_definition", built)
                setattr(built.run_fn, "__temporal_workflow_definition", built)
                return cls
        cls = workflow.defn(name=name)(cls)
        if not workflow.unsafe.in_sandbox():
            _validated[name] = _shape(_Definition.must_from_class(cls))
        return cls

    return decorator


def definition_of(cls: type, name: str) -> _Definition | None:
    """The definition temporalio's `_apply_to_class` builds for a valid `cls`,
    without its checks; None when `cls` has no single run method or has a
    dynamic config (then the SDK's decorator decides)."""
    if _Definition.from_class(cls) is not None:
        return None
    run_fn: Any = None
    signals: dict[str | None, Any] = {}
    queries: dict[str | None, Any] = {}
    updates: dict[str | None, _UpdateDefinition] = {}
    seen: set[str] = set()
    # What inspect.getmembers(cls) yields: each name once, as the MRO resolves it.
    for klass in cls.__mro__:
        for member_name, member in vars(klass).items():
            if member_name in seen:
                continue
            seen.add(member_name)
            if hasattr(member, "__temporal_workflow_run"):
                if run_fn is not None:
                    return None
                run_fn = member
            elif hasattr(member, "__temporal_signal_definition"):
                signal = getattr(member, "__temporal_signal_definition")
                signals[signal.name] = signal
            elif hasattr(member, "__temporal_query_definition"):
                query = getattr(member, "__temporal_query_definition")
                queries[query.name] = query
            elif member_name == "__init__" and hasattr(member, "__temporal_workflow_init"):
                pass
            elif hasattr(member, "__temporal_workflow_dynamic_config"):
                return None
            elif isinstance(getattr(member, "_defn", None), _UpdateDefinition) and hasattr(
                member, "validator"
            ):
                updates[member._defn.name] = member._defn
    if run_fn is None:
        return None
    return _Definition(
        name=name,
        cls=cls,
        run_fn=run_fn,
        signals=signals,
        queries=queries,
        updates=updates,
        sandboxed=True,
        failure_exception_types=[],
        versioning_behavior=temporalio.common.VersioningBehavior.UNSPECIFIED,
        dynamic_config_fn=None,
    )
