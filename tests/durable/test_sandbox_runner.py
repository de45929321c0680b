"""parkgate.durable.sandbox_runner: the sandbox runs the SDK's code strings,
compiled once, and nothing else changes."""

from __future__ import annotations

import inspect
import re

from temporalio.worker.workflow_sandbox import _runner
from temporalio.workflow import _Definition

from parkgate.durable.plugin import workflow_runner
from parkgate.durable.sandbox_runner import CompiledSandboxRunner, compiled
from parkgate.workflows.call import ToolCallWorkflow
from tests.durable.test_workflow_defn import _sandboxed_definition


def test_the_sdk_method_it_overrides_only_execs_its_code() -> None:
    """Pins the private method overridden: a change in the SDK fails here."""
    params = list(inspect.signature(_runner._Instance._run_code).parameters)
    assert params == ["self", "code", "extra_globals"]
    source = inspect.getsource(_runner._Instance._run_code)
    assert "exec(code, self.globals_and_locals, self.globals_and_locals)" in source
    assert len(re.findall(r"\bcode\b", source)) == 2  # the parameter and the exec: nothing else


def test_same_string_same_code_object() -> None:
    source = "x = 1\n"
    assert compiled(source) is compiled(source)
    namespace: dict[str, object] = {}
    exec(compiled(source), namespace)
    assert namespace["x"] == 1


async def test_new_runs_compile_nothing_again() -> None:
    assert isinstance(workflow_runner(), CompiledSandboxRunner)
    _Definition.must_from_class(ToolCallWorkflow)
    first = _sandboxed_definition(ToolCallWorkflow)  # compiles what a new run needs
    misses = compiled.cache_info().misses
    second = _sandboxed_definition(ToolCallWorkflow)
    assert compiled.cache_info().misses == misses  # every string of the second run was cached
    assert second.cls is not first.cls  # still a fresh class per run, from the sandbox
    assert second.name == first.name == "parkgate.ToolCall"
