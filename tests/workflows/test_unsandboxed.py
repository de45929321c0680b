"""A worker with `workflow_sandbox = false` runs the call workflow outside
Temporal's sandbox, with the same outcomes, records and guarantees.

The core paths of test_call_workflow run again here, with the worker built
from settings that turn the sandbox off (parkgate.runtime.worker.build_worker).
tests/workflows/test_determinism.py holds the workflow modules to what the
sandbox would have checked, on every path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from parkgate import workflows
from parkgate.durable import sandbox_runner
from parkgate.durable.plugin import ParkgatePlugin, plugin_of
from parkgate.durable.sandbox_runner import LeanSandboxRunner
from tests.fixtures.temporal import TEST_CONVERTER, durable_rig
from tests.workflows import test_call_workflow as sandboxed

test_auto_read_file_runs_and_records = sandboxed.test_auto_read_file_runs_and_records
test_approval_six_hours_later_runs_the_tool = sandboxed.test_approval_six_hours_later_runs_the_tool
test_two_concurrent_deciders_exactly_one_wins = (
    sandboxed.test_two_concurrent_deciders_exactly_one_wins
)
test_cancel_while_parked_never_executes = sandboxed.test_cancel_while_parked_never_executes
test_auto_write_with_permissive_policy = sandboxed.test_auto_write_with_permissive_policy
test_deny_reason_reaches_the_model = sandboxed.test_deny_reason_reaches_the_model


@pytest.fixture(autouse=True)
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every rig of these tests turns the sandbox off; no run may enter it."""
    entered: list[object] = []
    original_init = sandbox_runner._LeanInstance.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        entered.append(self)
        original_init(self, *args, **kwargs)

    def rig(*args: Any, **kwargs: Any) -> AbstractAsyncContextManager[Any]:
        return durable_rig(*args, workflow_sandbox=False, **kwargs)

    monkeypatch.setattr(sandboxed, "durable_rig", rig)
    monkeypatch.setattr(sandbox_runner._LeanInstance, "__init__", counting_init)
    yield entered
    assert entered == [], "a workflow run entered the sandbox"


def test_the_rig_really_turns_it_off(temporal_env: WorkflowEnvironment) -> None:
    plugin = plugin_of(temporal_env.client)
    assert plugin is not None and plugin.sandbox  # the tests' client sandboxes by default


@pytest.mark.parametrize("sandbox", [True, False])
def test_a_replayer_always_sandboxes(sandbox: bool) -> None:
    plugin = ParkgatePlugin(converter=TEST_CONVERTER, sandbox=sandbox)
    config = Replayer(workflows=workflows.ALL, plugins=[plugin]).config(active_config=True)
    assert isinstance(config["workflow_runner"], LeanSandboxRunner)
