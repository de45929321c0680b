"""The Temporal plugin every parkgate client, worker and replayer carries.

One bundle instead of the same three arguments in every place that talks to
Temporal: the data converter (pydantic, large payloads by reference, AES-GCM
on everything: parkgate.durable.codec), the workflow sandbox with parkgate's
pure modules passed through, and the exceptions that fail a workflow run.

A client connected with the plugin hands it on to every Worker built on it;
a Replayer takes it as `plugins=[...]`.

It also carries the proof keys (parkgate.approvals.proof, derived from the payload
keys): a client signs the messages it sends to workflows with them
(`proof_keys_of(client)`), and every worker or replayer built with the plugin
installs them where its workflows verify proofs. A replayer decodes plaintext
payloads (histories written before the codec); a worker refuses them.

Its client half (converter, proof keys: ParkgateClientPlugin) is in
parkgate.durable.client_plugin, which a client-only process connects with: this
module imports Temporal's worker package.
"""

from __future__ import annotations

import dataclasses
import pkgutil
from typing import TYPE_CHECKING

from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ReplayerConfig,
    UnsandboxedWorkflowRunner,
    WorkerConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from parkgate.durable.client_plugin import (
    PLUGIN_NAME,
    ParkgateClientPlugin,
    converter_and_keys,
    plugin_of,
    proof_keys_of,
)
from parkgate.durable.sandbox_runner import LeanSandboxRunner

if TYPE_CHECKING:
    from temporalio.client import Client

    from parkgate.approvals.proof import ProofKeys
    from parkgate.durable.blobs import BlobStore
    from parkgate.settings import Settings

__all__ = ["PLUGIN_NAME", "ParkgateClientPlugin", "ParkgatePlugin", "plugin_of",
           "proof_keys_of", "with_plugin", "workflow_runner"]


def _parkgate_modules() -> tuple[str, ...]:
    """Every parkgate module except the workflows themselves.

    The sandbox matches passthrough names by prefix, so `parkgate` itself cannot
    be listed: it would pass `parkgate.workflows` through and defeat the sandbox.
    """
    import parkgate

    return tuple(
        f"parkgate.{m.name}" for m in pkgutil.iter_modules(parkgate.__path__)
        if m.name != "workflows"
    )


#: Modules the workflow sandbox passes through: parkgate's pure models and
#: their pure dependencies (re-importing them per workflow run would be slow).
PASSTHROUGH_MODULES = (*_parkgate_modules(), "jsonschema", "pydantic", "pydantic_core")

#: Exceptions (besides Temporal's own FailureError) that fail a workflow run
#: instead of its task: none. A bug in workflow code fails the task, which
#: Temporal retries, so a parked call survives until a fixed worker deploys;
#: a call's own failures are ApplicationErrors raised on purpose.
WORKFLOW_FAILURE_TYPES: tuple[type[BaseException], ...] = ()


def workflow_runner() -> LeanSandboxRunner:
    """The sandbox every parkgate worker and replayer uses.

    It re-executes the workflow modules for every run, from code objects read
    once per process (parkgate.durable.workflow_code), and compiles the SDK's
    own code strings once (parkgate.durable.sandbox_runner)."""
    from parkgate.durable import workflow_code

    workflow_code.install()
    return LeanSandboxRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


class ParkgatePlugin(SimplePlugin, ParkgateClientPlugin):
    """Converter + sandbox + failure types for clients, workers and replayers.

    From `settings` (the converter of `parkgate.durable.converter.data_converter`,
    large payloads in `blobs`, by default the settings' history store) or from
    a ready `converter` (tests with a fixed key, tools reading old histories).
    Workflows run in the sandbox unless `sandbox` (by default the settings'
    `workflow_sandbox`, else on) says otherwise; a replayer always sandboxes.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        blobs: BlobStore | None = None,
        converter: DataConverter | None = None,
        sandbox: bool | None = None,
    ) -> None:
        converter, keys = converter_and_keys(settings, blobs, converter)
        self.converter = converter
        #: What this plugin's clients prove messages with (None: no payload keys).
        self.proof_keys: ProofKeys | None = keys
        if sandbox is None:
            sandbox = settings.workflow_sandbox if settings is not None else True
        #: Whether workers built with this plugin run workflows in the sandbox.
        self.sandbox = sandbox
        runner: WorkflowRunner = workflow_runner() if sandbox else UnsandboxedWorkflowRunner()
        super().__init__(
            PLUGIN_NAME,
            data_converter=converter,
            workflow_runner=runner,
            workflow_failure_exception_types=list(WORKFLOW_FAILURE_TYPES),
        )

    def _install_proof_keys(self) -> None:
        """Workflows of this process verify proofs with these keys (parkgate.approvals.proof)."""
        from parkgate.approvals import proof

        if self.proof_keys is not None:
            proof.install(self.proof_keys)

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        self._install_proof_keys()
        return super().configure_worker(config)

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        """A replayer reads histories as they were written: plaintext ones too.
        It replays in the sandbox whatever the workers run in (it checks them)."""
        from parkgate.durable.converter import lenient_codec

        self._install_proof_keys()
        config = super().configure_replayer(config)
        if not self.sandbox:  # a sandboxed plugin's runner is already in the config
            config["workflow_runner"] = workflow_runner()
        converter = config.get("data_converter")
        if converter is not None:
            config["data_converter"] = dataclasses.replace(
                converter, payload_codec=lenient_codec(converter.payload_codec)
            )
        return config


def with_plugin(client: Client, plugin: ParkgatePlugin) -> Client:
    """`client` (same connection and namespace) with `plugin` instead of its own
    parkgate plugin (e.g. another converter, or the full plugin in place of the
    client half); workers built on it carry it too."""
    config = client.config()
    others = [p for p in config.get("plugins", []) if not isinstance(p, ParkgateClientPlugin)]
    config["plugins"] = [*others, plugin]
    config["data_converter"] = plugin.converter
    return type(client)(**config)
