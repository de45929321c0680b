"""The one data converter: pydantic payloads, large values by reference, AES-GCM.

It assembles the payload codecs of `parkgate.durable.codec` (encryption) and
`parkgate.durable.blobs` (large values stored aside, sealed by the same codec),
so neither of those imports the other's assembly.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from temporalio.converter import DataConverter, PayloadCodec

from parkgate.durable.blobs import BlobCodec, ChainCodec, LazyRepositoryBlobs
from parkgate.durable.codec import PARKGATE_CONVERTER, EncryptionCodec, codec_for

if TYPE_CHECKING:
    from parkgate.durable.blobs import BlobStore
    from parkgate.settings import Settings


def lenient_codec(codec: PayloadCodec | None) -> PayloadCodec | None:
    """`codec` with its encryption codec lenient (EncryptionCodec.lenient), in a
    chain too; anything else unchanged."""
    if isinstance(codec, EncryptionCodec):
        return codec.lenient()
    if isinstance(codec, ChainCodec):
        return ChainCodec([lenient_codec(c) or c for c in codec.codecs])
    if isinstance(codec, BlobCodec):
        return codec  # its sealer only opens blobs (always encrypted)
    return codec


def encryption_of(codec: PayloadCodec | None) -> EncryptionCodec | None:
    """The EncryptionCodec of a converter's codec (alone or in a chain)."""
    if isinstance(codec, EncryptionCodec):
        return codec
    if isinstance(codec, ChainCodec):
        return codec.encryption
    return None


def converter_with(
    codec: EncryptionCodec, blobs: BlobStore | None = None, *, threshold: int = 65536
) -> DataConverter:
    """The pydantic data converter with `codec` on every payload.

    With `blobs`, payloads larger than `threshold` bytes are first stored there
    and replaced by a reference (parkgate.durable.blobs), then everything is encrypted.
    """
    if blobs is None:
        return dataclasses.replace(PARKGATE_CONVERTER, payload_codec=codec)
    chain = ChainCodec([BlobCodec(blobs, codec, threshold), codec])
    return dataclasses.replace(PARKGATE_CONVERTER, payload_codec=chain)


def data_converter(settings: Settings, blobs: BlobStore | None = None) -> DataConverter:
    """The one DataConverter for clients, workers and replayers of these settings.

    Large payloads go to `blobs`, by default the history store of `settings`
    (opened on first use), so no Temporal payload nears its 2 MiB limit.
    """
    store = blobs or LazyRepositoryBlobs(settings.effective_database_url)
    return converter_with(codec_for(settings), store, threshold=settings.blob_threshold_bytes)
