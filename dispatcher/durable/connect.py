"""Connect to Temporal the way Settings say: address, namespace, TLS or API key.

Always with parkgate's client plugin (parkgate.durable.client_plugin): pydantic
models, every payload encrypted, messages proven. Only its client half: a worker
built on the client gets the worker half, the sandbox, over the same converter
(parkgate.runtime.worker.worker_client), so a process that is only a client
(`parkgate api`) does not import Temporal's worker package.
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.service import TLSConfig

from parkgate.durable.blobs import BlobStore
from parkgate.durable.client_plugin import ParkgateClientPlugin
from parkgate.settings import Settings


def tls_config(settings: Settings) -> TLSConfig | bool:
    """TLS from the settings: client cert/key and CA when given; True for system roots."""
    paths = (
        settings.temporal_tls_cert_path,
        settings.temporal_tls_key_path,
        settings.temporal_tls_ca_path,
    )
    if any(paths):
        cert, key, ca = (p.read_bytes() if p else None for p in paths)
        return TLSConfig(client_cert=cert, client_private_key=key, server_root_ca_cert=ca)
    # Temporal Cloud with an API key always speaks TLS.
    return bool(settings.temporal_tls or settings.temporal_api_key)


async def connect(
    settings: Settings, *, address: str | None = None, blobs: BlobStore | None = None
) -> Client:
    """A Temporal client for `settings` (address override for embedded servers).

    Large payloads go to `blobs` (an open history store), else to the store of
    `settings.database_url`, opened on first use."""
    return await Client.connect(
        address or settings.temporal_address,
        namespace=settings.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=tls_config(settings),
        plugins=[ParkgateClientPlugin(settings, blobs=blobs)],
    )
