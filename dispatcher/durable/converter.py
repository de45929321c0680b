"""The one data converter: pydantic payloads, large values by reference, AES-GCM.

It assembles the payload codecs of `parkgate.durable.codec` (encryption) and
`parkgate.durable.blobs` (large values stored aside, sealed by the same codec),
so neither of those imports the other's assembly.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any

from temporalio.converter import (
    DataConverter,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
)

from parkgate.durable.blobs import BlobCodec, ChainCodec, LazyRepositoryBlobs
from parkgate.durable.codec import PARKGATE_CONVERTER, EncryptionCodec, codec_for

if TYPE_CHECKING:
    from parkgate.durable.blobs import BlobStore
    from parkgate.settings import Settings


#: The parts of a DataConverter that take a serialization context
#: (temporalio's `DataConverter.with_context`; `external_storage` is newer).
_CONTEXTUAL_PARTS = ("payload_converter", "payload_codec", "failure_converter",
                     "external_storage")


@dataclasses.dataclass(frozen=True)
class ParkgateDataConverter(DataConverter):
    """DataConverter whose copies for a serialization context are cheap.

    The worker asks for a converter bound to a context (the workflow's, an
    activity's) for nearly every payload it encodes or decodes. The SDK's
    `with_context` copies the converter with `dataclasses.replace`, which runs
    `__post_init__` again: a new pydantic payload converter and failure
    converter are built, then overwritten by the contextual ones. That was
    about 4% of a durable read's CPU in the worker's process
    (docs/PERFORMANCE.md, "Third round"). This one makes the same copy, with
    the same parts bound to the context, without building what it discards.
    """

    def with_context(self, context: SerializationContext) -> Any:
        bound = {}
        for name in _CONTEXTUAL_PARTS:
            part = getattr(self, name, None)
            if isinstance(part, WithSerializationContext):
                new = part.with_context(context)
                if new is not part:
                    bound[name] = new
        if not bound:
            return self
        clone = copy.copy(self)  # copies the fields; no __init__, no __post_init__
        for name, part in bound.items():
            object.__setattr__(clone, name, part)
        return clone


#: parkgate's pydantic converter as a ParkgateDataConverter (no codec yet).
_BASE = ParkgateDataConverter(**{
    f.name: getattr(PARKGATE_CONVERTER, f.name)
    for f in dataclasses.fields(DataConverter) if f.init
})


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
        return dataclasses.replace(_BASE, payload_codec=codec)
    chain = ChainCodec([BlobCodec(blobs, codec, threshold), codec])
    return dataclasses.replace(_BASE, payload_codec=chain)


def data_converter(settings: Settings, blobs: BlobStore | None = None) -> DataConverter:
    """The one DataConverter for clients, workers and replayers of these settings.

    Large payloads go to `blobs`, by default the history store of `settings`
    (opened on first use), so no Temporal payload nears its 2 MiB limit.
    """
    store = blobs or LazyRepositoryBlobs(settings.effective_database_url)
    return converter_with(codec_for(settings), store, threshold=settings.blob_threshold_bytes)
