"""parkgate.durable.sandbox_runner: the sandbox runs the SDK's code strings,
compiled once, and nothing else changes."""

from __future__ import annotations

import inspect
import re

import pytest
from temporalio.api.enums.v1 import CommandType
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker._workflow_instance import _WorkflowInstanceImpl
from temporalio.worker.workflow_sandbox import _in_sandbox, _runner
from temporalio.workflow import _Definition

from parkgate.durable.plugin import workflow_runner
from parkgate.durable.sandbox_runner import LeanSandboxRunner, compiled
from parkgate.workflows.call import ToolCallWorkflow
from tests.durable.test_workflow_defn import _sandboxed_definition, sandboxed_instance


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
    assert isinstance(workflow_runner(), LeanSandboxRunner)
    _Definition.must_from_class(ToolCallWorkflow)
    first = _sandboxed_definition(ToolCallWorkflow)  # compiles what a new run needs
    misses = compiled.cache_info().misses
    second = _sandboxed_definition(ToolCallWorkflow)
    assert compiled.cache_info().misses == misses  # every string of the second run was cached
    assert second.cls is not first.cls  # still a fresh class per run, from the sandbox
    assert second.name == first.name == "parkgate.ToolCall"


@pytest.mark.parametrize("read", ["get_serialization_context", "get_external_store_context"])
def test_the_context_reads_it_skips_the_sandbox_for_are_plain_forwards(read: str) -> None:
    """Pins what reading a context outside the sandbox relies on."""
    sdk = inspect.getsource(getattr(_runner._Instance, read))
    assert f"__temporal_in_sandbox.{read}(__temporal_command_info)" in sdk
    forward = inspect.getsource(getattr(_in_sandbox.InSandbox, read))
    assert f"return self.instance.{read}(command_info)" in forward
    body = inspect.getsource(getattr(_WorkflowInstanceImpl, read))
    assert "import" not in body and "workflow." not in body.replace("temporalio.workflow", "")


@pytest.mark.parametrize("command", [
    None,
    CommandInfo(command_type=CommandType.COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK, command_seq=7),
    CommandInfo(command_type=CommandType.COMMAND_TYPE_START_TIMER, command_seq=1),
], ids=["no command", "unknown activity", "timer"])
async def test_contexts_are_the_ones_the_sandbox_gives(command: CommandInfo | None) -> None:
    instance = sandboxed_instance(ToolCallWorkflow)
    for read in ("get_serialization_context", "get_external_store_context"):
        assert getattr(instance, read)(command) == getattr(_runner._Instance, read)(
            instance, command
        )
