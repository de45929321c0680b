"""Large values travel by reference: payloads over a threshold live in the store.

Temporal refuses a workflow task whose payloads pass 2 MiB, and a 1 MiB tool
input is copied into several payloads (workflow input, classify, execute...).
`BlobCodec` runs before encryption: a payload whose serialized size is above
`blob_threshold_bytes` is stored once in the history database (`blobs`, id =
SHA-256 of the clear serialized payload, content sealed with the payload key)
and replaced by a small reference payload. Decoding loads the blob, checks the
hash and returns the original payload; payloads that are not references
(older histories, small values) pass through unchanged.

Each stored blob also records which workflow referred to it (`blob_refs`,
from Temporal's serialization context) so `audit prune` removes blobs no
retained call refers to.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, Self

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext

from dispatcher.codec import CodecError

if TYPE_CHECKING:
    from dispatcher.codec import EncryptionCodec
    from dispatcher.store.repository import Repository

#: The encoding of a reference payload.
BLOB_ENCODING = b"binary/parkgate-blob"
SHA_META = "parkgate-blob-sha256"
SIZE_META = "parkgate-blob-size"
#: Clear payloads kept in memory per process (replays decode the same blobs again).
CACHE_BYTES = 64 * 1024 * 1024


class BlobError(CodecError):
    """A reference whose blob is missing or does not match its hash."""


class BlobStore(Protocol):
    """Where blobs live (dispatcher.store.Repository implements it)."""

    async def put_blob(self, blob_id: str, data: bytes, size: int, workflow_id: str) -> None: ...

    async def get_blob(self, blob_id: str) -> bytes | None: ...


class LazyRepositoryBlobs:
    """The history store at `url`, opened on first use (clients rarely need it)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._repo: Repository | None = None
        self._lock: asyncio.Lock | None = None

    async def _open(self) -> Repository:
        if self._repo is None:
            self._lock = self._lock or asyncio.Lock()
            async with self._lock:
                if self._repo is None:
                    from dispatcher.store.repository import Repository

                    self._repo = await Repository.connect(self.url)
        return self._repo

    async def put_blob(self, blob_id: str, data: bytes, size: int, workflow_id: str) -> None:
        await (await self._open()).put_blob(blob_id, data, size, workflow_id)

    async def get_blob(self, blob_id: str) -> bytes | None:
        return await (await self._open()).get_blob(blob_id)


class _Cache:
    """Clear serialized payloads by id, least recently used out first."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self.items: OrderedDict[str, bytes] = OrderedDict()

    def get(self, key: str) -> bytes | None:
        value = self.items.get(key)
        if value is not None:
            self.items.move_to_end(key)
        return value

    def put(self, key: str, value: bytes) -> None:
        if key in self.items or len(value) > self.limit:
            return
        self.items[key] = value
        self.used += len(value)
        while self.used > self.limit:
            _, old = self.items.popitem(last=False)
            self.used -= len(old)


class BlobCodec(PayloadCodec, WithSerializationContext):
    """Store payloads above `threshold` bytes in `store`; carry a reference instead."""

    def __init__(
        self,
        store: BlobStore,
        sealer: EncryptionCodec,
        threshold: int,
        *,
        workflow_id: str = "",
        cache: _Cache | None = None,
    ) -> None:
        self.store = store
        self.sealer = sealer
        self.threshold = threshold
        self.workflow_id = workflow_id
        self._cache = cache or _Cache()

    def with_context(self, context: SerializationContext) -> Self:
        workflow_id = getattr(context, "workflow_id", None) or ""
        return type(self)(
            self.store, self.sealer, self.threshold, workflow_id=workflow_id, cache=self._cache
        )

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._encode_one(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode_one(p) for p in payloads]

    async def _encode_one(self, payload: Payload) -> Payload:
        raw = payload.SerializeToString()
        if len(raw) <= self.threshold:
            return payload
        blob_id = hashlib.sha256(raw).hexdigest()
        sealed = self.sealer.encrypt(payload).SerializeToString()
        await self.store.put_blob(blob_id, sealed, len(raw), self.workflow_id)
        self._cache.put(blob_id, raw)
        return reference(blob_id, len(raw))

    async def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != BLOB_ENCODING:
            return payload
        blob_id = payload.metadata.get(SHA_META, b"").decode("ascii", errors="replace")
        raw = self._cache.get(blob_id)
        if raw is None:
            raw = await self.load(blob_id)
            self._cache.put(blob_id, raw)
        out = Payload()
        out.ParseFromString(raw)
        return out

    async def load(self, blob_id: str) -> bytes:
        """The clear serialized payload of `blob_id`, hash-checked (BlobError otherwise)."""
        data = await self.store.get_blob(blob_id)
        if data is None:
            raise BlobError(
                f"payload blob {blob_id} is not in the history store "
                "(pruned, or a different database than the one that wrote it)"
            )
        sealed = Payload()
        sealed.ParseFromString(data)
        raw = self.sealer.open(sealed)
        actual = hashlib.sha256(raw).hexdigest()
        if actual != blob_id:
            raise BlobError(f"payload blob {blob_id} is corrupt: its content hashes to {actual}")
        return raw


def reference(blob_id: str, size: int) -> Payload:
    """The small payload that stands for a stored one."""
    return Payload(
        metadata={
            "encoding": BLOB_ENCODING,
            SHA_META: blob_id.encode("ascii"),
            SIZE_META: str(size).encode("ascii"),
        }
    )


class ChainCodec(PayloadCodec, WithSerializationContext):
    """Codecs applied in order on encode and in reverse order on decode."""

    def __init__(self, codecs: Sequence[PayloadCodec]) -> None:
        self.codecs = list(codecs)

    def with_context(self, context: SerializationContext) -> Self:
        return type(self)(
            [c.with_context(context) if isinstance(c, WithSerializationContext) else c
             for c in self.codecs]
        )

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in self.codecs:
            out = await codec.encode(out)
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in reversed(self.codecs):
            out = await codec.decode(out)
        return out

    @property
    def encryption(self) -> EncryptionCodec | None:
        """The encryption codec in the chain (it also seals the blobs)."""
        from dispatcher.codec import EncryptionCodec

        return next((c for c in self.codecs if isinstance(c, EncryptionCodec)), None)
