"""The client half of parkgate's Temporal plugin: the data converter and the proof keys.

A process that talks to Temporal only as a client (`parkgate api`, the CLI's
`decide` and `audit`) connects with this one (parkgate.durable.connect).
The full ParkgatePlugin (parkgate.durable.plugin) is also a worker plugin, and
its base, `temporalio.plugin.SimplePlugin`, imports Temporal's whole worker
package (the workflow sandbox, the activity machinery: 29 modules and ~2.7 MB
in a process that never runs a worker, docs/PERFORMANCE.md "At rest").
A worker built on a client that carries only this plugin gets the full one
over the same converter (parkgate.runtime.worker.worker_client).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from temporalio.client import Client, ClientConfig, Plugin

if TYPE_CHECKING:
    from temporalio.converter import DataConverter
    from temporalio.service import ConnectConfig, ServiceClient

    from parkgate.approvals.proof import ProofKeys
    from parkgate.durable.blobs import BlobStore
    from parkgate.settings import Settings

PLUGIN_NAME = "parkgate"


def converter_and_keys(
    settings: Settings | None, blobs: BlobStore | None, converter: DataConverter | None
) -> tuple[DataConverter, ProofKeys | None]:
    """The converter (`converter`, else parkgate's from `settings` with large payloads
    in `blobs`) and the proof keys its codec carries (None without payload keys)."""
    from parkgate.durable.converter import data_converter, encryption_of

    if converter is None:
        if settings is None:
            raise TypeError("a parkgate plugin needs settings or a converter")
        converter = data_converter(settings, blobs)
    sealer = encryption_of(converter.payload_codec)
    return converter, (sealer.proof_keys if sealer else None)


class ParkgateClientPlugin(Plugin):
    """parkgate's converter on a client, and the keys its messages are proven with.

    From `settings` (large payloads in `blobs`, by default the settings'
    history store) or from a ready `converter`, as ParkgatePlugin."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        blobs: BlobStore | None = None,
        converter: DataConverter | None = None,
    ) -> None:
        self.converter, keys = converter_and_keys(settings, blobs, converter)
        #: What this plugin's clients prove messages with (None: no payload keys).
        self.proof_keys: ProofKeys | None = keys

    def name(self) -> str:
        return PLUGIN_NAME

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config["data_converter"] = self.converter
        return config

    async def connect_service_client(
        self, config: ConnectConfig, next: Callable[[ConnectConfig], Awaitable[ServiceClient]]
    ) -> ServiceClient:
        return await next(config)


def plugin_of(client: Client) -> ParkgateClientPlugin | None:
    """The parkgate plugin `client` was created with (client-only or full), if any."""
    for plugin in client.config().get("plugins", []):
        if isinstance(plugin, ParkgateClientPlugin):
            return plugin
    return None


def proof_keys_of(client: Client) -> ProofKeys | None:
    """The keys `client` proves its messages to workflows with (parkgate.approvals.proof);
    None for a client without a parkgate plugin or without payload keys."""
    plugin = plugin_of(client)
    return plugin.proof_keys if plugin is not None else None
