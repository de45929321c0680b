"""A client connected with parkgate's client plugin only (what `parkgate api` and
parkgate.durable.connect use, without Temporal's worker package) still runs calls:
a worker built on it gets the full ParkgatePlugin over the same converter, and the
decisions it proves are accepted by the workflows that worker runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from parkgate.calls.records import CallStatus
from parkgate.durable.client_plugin import ParkgateClientPlugin, plugin_of, proof_keys_of
from parkgate.durable.plugin import ParkgatePlugin
from parkgate.models import ToolUseBlock
from parkgate.runtime.worker import worker_client
from tests.fixtures.temporal import TEST_CONVERTER, durable_rig, make_settings


def client_only(client: Client) -> Client:
    """The same connection with the client half of the plugin in place of the full one."""
    config = client.config()
    config["plugins"] = [ParkgateClientPlugin(converter=TEST_CONVERTER)]
    return type(client)(**config)


@pytest.mark.parametrize("sandbox", [True, False])
def test_the_worker_gets_the_full_plugin_over_the_same_converter(
    temporal_env: WorkflowEnvironment, tmp_path: Path, sandbox: bool
) -> None:
    client = client_only(temporal_env.client)
    assert not isinstance(plugin_of(client), ParkgatePlugin)
    settings = make_settings(tmp_path / "data", tmp_path, workflow_sandbox=sandbox)
    upgraded = worker_client(client, settings)
    plugin = plugin_of(upgraded)
    assert isinstance(plugin, ParkgatePlugin) and plugin.sandbox is sandbox
    assert plugin.converter is TEST_CONVERTER and upgraded.data_converter is TEST_CONVERTER
    keys = proof_keys_of(client)
    assert keys is not None and proof_keys_of(upgraded) is keys
    assert worker_client(upgraded, settings) is upgraded  # already whole: kept


async def test_an_approval_through_a_client_only_connection_runs_the_tool(
    temporal_env: WorkflowEnvironment, repo: Any, tmp_path: Path
) -> None:
    async with durable_rig(client_only(temporal_env.client), repo, tmp_path) as rig:
        session = rig.session()
        call = ToolUseBlock(
            id="tu_c", name="write_file", input={"path": "out.txt", "content": "approved"}
        )
        handle = await rig.dispatcher.start(call, session)
        request_id = await rig.wait_parked(session.session_id, "tu_c")
        winner = await rig.dispatcher.resolve_confirmation(
            request_id, "allow", decided_by="alice", via="link"
        )
        assert winner == "allow"
        outcome = await handle.result()
        assert outcome.status == CallStatus.SUCCEEDED, outcome.result.text
        assert (rig.workspace / "out.txt").read_text() == "approved"
