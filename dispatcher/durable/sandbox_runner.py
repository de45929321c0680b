"""The workflow sandbox runner, minus two costs per payload and per activation.

temporalio's sandbox (`worker/workflow_sandbox/_runner.py`) drives the
workflow inside the sandbox by `exec` of short Python source strings: one to
import the workflow class for a new run, one to build the instance, one per
activation, one each time a payload's serialization context is asked for
(several times per activation). `exec` of a string compiles it first, every
time: about 5% of a durable read's CPU in the worker's process
(docs/PERFORMANCE.md, "Third round").

`LeanSandboxRunner` is the SDK's runner with two changes:

1. Its instances hand `exec` the same strings already compiled. What is
   executed, where and with which globals is unchanged: only the compile
   step is done once per distinct string.
2. The serialization and external-store contexts of a payload (which
   workflow or activity it belongs to, for the codec) are read from the
   run's instance directly. The SDK swaps the sandbox's import machinery and
   builtins in and out around each read, several times per activation
   (about 6% of a read's CPU), but a read is a few attribute lookups on the
   SDK's own instance class (`_WorkflowInstanceImpl`, from a passed-through
   module: the same code inside and outside): no workflow code runs, nothing
   is imported. A new run, every activation, and any other call into the
   sandbox still go through the sandbox as before.

Both override private parts of the SDK (`_Instance._run_code`, its two
context reads, `InSandbox.instance`);
`tests/durable/test_sandbox_runner.py` pins what they rely on, so an SDK
release that changes them fails that test instead of running differently.
"""

from __future__ import annotations

import dataclasses
import functools
from types import CodeType
from typing import Any, cast

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox._runner import _Instance


@functools.lru_cache(maxsize=256)
def compiled(source: str) -> CodeType:
    """`source` compiled as `exec` compiles a string (same file name and mode).

    The strings are the SDK's: a few fixed ones, plus one per workflow class
    (its import); the bound only guards against an SDK that makes them vary."""
    return compile(source, "<string>", "exec")


class _LeanInstance(_Instance):
    """The SDK's sandboxed instance: compiled code for `exec`, and the
    serialization context read without entering the sandbox."""

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # exec() takes a code object where it takes a string; the SDK's method
        # only passes `code` on to exec.
        super()._run_code(cast(str, compiled(code)), **extra_globals)

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        run = self._run_instance()
        if run is None:  # pragma: no cover - only before the instance exists
            return super().get_serialization_context(command_info)
        context: SerializationContext | None = run.get_serialization_context(command_info)
        return context

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        run = self._run_instance()
        if run is None:  # pragma: no cover - only before the instance exists
            return super().get_external_store_context(command_info)
        context: StorageDriverStoreContext = run.get_external_store_context(command_info)
        return context

    def _run_instance(self) -> Any:
        """The SDK's workflow instance this sandbox runs (None before it exists)."""
        in_sandbox: Any = self.globals_and_locals.get("__temporal_in_sandbox")
        return None if in_sandbox is None else in_sandbox.instance


@dataclasses.dataclass(frozen=True)
class LeanSandboxRunner(SandboxedWorkflowRunner):
    """SandboxedWorkflowRunner with compiled code strings and direct context reads."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _LeanInstance(det, self.runner_class, self.restrictions)
