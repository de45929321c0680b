"""The workflow sandbox runner, with its code strings compiled once per process.

temporalio's sandbox (`worker/workflow_sandbox/_runner.py`) drives the
workflow inside the sandbox by `exec` of short Python source strings: one to
import the workflow class for a new run, one to build the instance, one per
activation, one each time a payload's serialization context is asked for
(several times per activation). `exec` of a string compiles it first, every
time: about 5% of a durable read's CPU in the worker's process
(docs/PERFORMANCE.md, "Third round").

`CompiledSandboxRunner` is the SDK's runner whose instances hand `exec` the
same strings already compiled. What is executed, where and with which
globals is unchanged: only the compile step is done once per distinct string.
It overrides `_Instance._run_code`, a private method of the SDK;
`tests/durable/test_sandbox_runner.py` pins its shape, so an SDK release that
changes it fails that test instead of running differently.
"""

from __future__ import annotations

import dataclasses
import functools
from types import CodeType
from typing import Any, cast

from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance


@functools.lru_cache(maxsize=256)
def compiled(source: str) -> CodeType:
    """`source` compiled as `exec` compiles a string (same file name and mode).

    The strings are the SDK's: a few fixed ones, plus one per workflow class
    (its import); the bound only guards against an SDK that makes them vary."""
    return compile(source, "<string>", "exec")


class _CompiledInstance(_Instance):
    """The SDK's sandboxed instance; `exec` gets compiled code."""

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # exec() takes a code object where it takes a string; the SDK's method
        # only passes `code` on to exec.
        super()._run_code(cast(str, compiled(code)), **extra_globals)


@dataclasses.dataclass(frozen=True)
class CompiledSandboxRunner(SandboxedWorkflowRunner):
    """SandboxedWorkflowRunner whose code strings are compiled once."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledInstance(det, self.runner_class, self.restrictions)
