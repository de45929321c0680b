"""parkgate.durable.workflow_defn: the sandbox's per-run definition is the SDK's.

Inside the sandbox `ToolCallWorkflow`'s definition is built without the SDK's
re-validation; it must be what temporalio's own decorator builds, field by
field, and a class whose shape differs from the validated one must go
through the SDK's decorator (and its errors).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import temporalio.converter
from temporalio import workflow
from temporalio.api.common.v1 import Payloads
from temporalio.api.failure.v1 import Failure
from temporalio.worker._workflow_instance import WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox._runner import _fake_info
from temporalio.workflow import _Definition

from parkgate.durable import workflow_defn
from parkgate.durable.payloads import CallInput, CallOutcome
from parkgate.durable.plugin import workflow_runner
from parkgate.workflows.call import ToolCallWorkflow


def sandboxed_instance(cls: type) -> Any:
    """A new run of `cls` in parkgate's sandbox (the runner's instance)."""
    defn = _Definition.must_from_class(cls)
    return workflow_runner().create_instance(
        WorkflowInstanceDetails(
            payload_converter_factory=temporalio.converter.DataConverter.default._new_payload_converter,
            failure_converter_class=temporalio.converter.DataConverter.default.failure_converter_class,
            interceptor_classes=[],
            defn=defn,
            info=_fake_info,
            randomness_seed=-1,
            extern_functions={},
            disable_eager_activity_execution=False,
            worker_level_failure_exception_types=[],
            patch_activation_callback=None,
            last_completion_result=Payloads(),
            last_failure=Failure(),
        )
    )


def _sandboxed_definition(cls: type) -> _Definition:
    """The definition a new run of `cls` gets inside parkgate's sandbox."""
    inner = sandboxed_instance(cls).globals_and_locals["__temporal_in_sandbox"].instance
    return inner._defn


def _comparable(value: Any) -> Any:
    """Functions and classes by qualified name (the sandbox's are other objects)."""
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _comparable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value


async def test_the_sandboxed_definition_is_the_sdks() -> None:
    host = _Definition.must_from_class(ToolCallWorkflow)
    assert "parkgate.ToolCall" in workflow_defn._validated
    sandboxed = _sandboxed_definition(ToolCallWorkflow)
    assert sandboxed.cls is not ToolCallWorkflow  # a fresh class of this run
    assert _comparable(sandboxed) == _comparable(host)
    # Handlers, validators and types: the run's own functions, the same types.
    assert sandboxed.updates.keys() == host.updates.keys()
    for name, update in sandboxed.updates.items():
        assert update.fn is not host.updates[name].fn
        assert update.fn.__qualname__ == host.updates[name].fn.__qualname__
        assert (update.validator is None) == (host.updates[name].validator is None)
    assert sandboxed.arg_types == host.arg_types
    assert sandboxed.ret_type == host.ret_type


class _Fresh(ToolCallWorkflow):
    """Not decorated at import: the test decorates it once."""

    @workflow.run
    async def run(self, inp: CallInput) -> CallOutcome:  # pragma: no cover - never run
        return await super().run(inp)


#: definition_of(_Fresh) before the SDK's decorator is applied to it.
_FRESH_BUILT = workflow_defn.definition_of(_Fresh, "fresh")


def test_definition_of_matches_the_sdk_on_a_fresh_class() -> None:
    assert _FRESH_BUILT is not None
    real = _Definition.from_class(_Fresh) or _Definition.must_from_class(
        workflow.defn(name="fresh")(_Fresh)
    )
    assert _comparable(_FRESH_BUILT) == _comparable(real)


def test_another_shape_goes_through_the_sdk() -> None:
    # Outside the sandbox it is always temporalio's decorator: its checks hold.
    class NoRun:
        pass

    with pytest.raises(ValueError, match=r"Missing @workflow\.run"):
        workflow_defn.defn(name="no-run")(NoRun)
    assert "no-run" not in workflow_defn._validated


async def test_each_run_executes_the_workflow_code_afresh_from_one_code_object() -> None:
    # parkgate.durable.workflow_code: read once per process, executed per run.
    first_cls = _sandboxed_definition(ToolCallWorkflow).cls
    second_cls = _sandboxed_definition(ToolCallWorkflow).cls
    assert first_cls is not second_cls and first_cls is not ToolCallWorkflow
    # The same code, new functions over new module globals each run.
    assert first_cls.run.__code__ is second_cls.run.__code__
    assert first_cls.run.__globals__ is not second_cls.run.__globals__
    assert first_cls.run.__globals__ is not ToolCallWorkflow.run.__globals__
    assert type(first_cls.run.__globals__["__loader__"]).__name__ == "_CodeCachingLoader"
    # The sandbox's restrictions still apply to the re-executed modules: the
    # part modules (the workflow's parts, imported by call.py) see `datetime`
    # through the sandbox's restricting proxy.
    notices = first_cls.run.__globals__["Notices"]
    assert notices is not ToolCallWorkflow.run.__globals__["Notices"]
    seen = next(f.__globals__ for f in vars(notices).values()
                if callable(f) and hasattr(f, "__globals__"))
    assert "Restricted" in type(seen["datetime"]).__name__



class _Later:
    @workflow.run
    async def run(self) -> None:
        return None


class _LaterAgain:
    @workflow.run
    async def run(self) -> None:
        return None


def test_a_definition_that_no_longer_fits_falls_back_to_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A future SDK whose private _Definition takes other fields: the builder
    # fails, and the run gets temporalio's own (validating) decorator instead of
    # a failed workflow task.
    workflow_defn.defn(name="later")(_Later)  # validated outside the sandbox
    assert "later" in workflow_defn._validated

    def no_longer_fits(cls: type, name: str) -> _Definition | None:
        raise TypeError("_Definition.__init__() got an unexpected keyword argument")

    monkeypatch.setattr(workflow_defn, "definition_of", no_longer_fits)
    monkeypatch.setattr(workflow.unsafe, "in_sandbox", lambda: True)
    built = _Definition.must_from_class(workflow_defn.defn(name="later")(_LaterAgain))
    assert built.name == "later"
    assert built.run_fn.__qualname__ == "_LaterAgain.run"


def test_the_first_import_a_finder_sees_is_cached_too() -> None:
    # A finder installed after the host imported the workflows (install() runs
    # when the first worker is built) hands the first run the cached code too,
    # so that run and every later one execute one code object.
    import parkgate.workflows
    from parkgate.durable.workflow_code import WorkflowCodeFinder

    finder = WorkflowCodeFinder()
    path = list(parkgate.workflows.__path__)
    first = finder.find_spec("parkgate.workflows.call", path)
    again = finder.find_spec("parkgate.workflows.call", path)
    assert first is not None and again is not None and first is not again
    assert type(first.loader).__name__ == "_CodeCachingLoader"
    assert first.loader.get_code("parkgate.workflows.call") is \
        again.loader.get_code("parkgate.workflows.call")
    assert finder.find_spec("parkgate.models", None) is None  # not a workflow module


def test_the_code_is_cached_under_an_import_hook(tmp_path: Any) -> None:
    # beartype.claw (imported by FastMCP) puts a path hook before the standard
    # one: the workflow modules' loader becomes its SourceFileLoader subclass.
    # The finder still reads them once (in a fresh interpreter: the hook is global).
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from beartype.claw import beartype_package\n"
        "beartype_package('json')\n"
        "import parkgate.workflows\n"
        "from parkgate.durable.workflow_code import WorkflowCodeFinder\n"
        "finder = WorkflowCodeFinder()\n"
        "path = list(parkgate.workflows.__path__)\n"
        "a = finder.find_spec('parkgate.workflows.call', path)\n"
        "b = finder.find_spec('parkgate.workflows.call', path)\n"
        "name = 'parkgate.workflows.call'\n"
        "same = a.loader.get_code(name) is b.loader.get_code(name)\n"
        "print(type(a.loader).__name__, same)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["_CodeCachingLoader", "True"]
