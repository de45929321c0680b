"""Large values travel by reference: payloads over a threshold live in the store.

Temporal refuses a workflow task whose payloads pass 2 MiB, and a 1 MiB tool
input is copied into several payloads (workflow input, classify, execute...).
`BlobCodec` runs before encryption: a payload whose serialized size is above
`blob_threshold_bytes` is stored once in the history database (`blobs`, id =
SHA-256 of the clear serialized payload, content sealed with the payload key)
and replaced by a small reference payload. Decoding loads the blob, checks the
hash and returns the original payload; payloads that are not references
(older histories, small values) pass through unchanged.

A large JSON payload first has its long strings (over a quarter of the
threshold) stored as blobs of their own and blanked, their places listed in
the metadata: the 1 MiB `content` of a write is then stored once, however many
payloads (workflow input, classify, execute, approval edits) carry it. Only
what is still over the threshold after that is stored whole.

Each stored blob also records which workflow referred to it (`blob_refs`,
from Temporal's serialization context) so `audit prune` removes blobs no
retained call refers to.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Self

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext

from parkgate.durable.codec import CodecError

if TYPE_CHECKING:
    from parkgate.durable.codec import EncryptionCodec
    from parkgate.store.repository import Repository

log = logging.getLogger("parkgate.durable.blobs")

#: The encoding of a reference payload.
BLOB_ENCODING = b"binary/parkgate-blob"
SHA_META = "parkgate-blob-sha256"
SIZE_META = "parkgate-blob-size"
JSON_ENCODING = b"json/plain"
#: A JSON payload whose long strings are blobs (listed in STRINGS_META as [path, id]).
STRINGS_ENCODING = b"json/parkgate-blob-strings"
STRINGS_META = "parkgate-blob-strings"
#: The payload a stored string is kept in (its data is the UTF-8 text).
STRING_ENCODING = b"text/parkgate-blob-string"
#: Largest payload sent inline when the store cannot take it (Temporal warns
#: above 512 KiB and refuses 2 MiB per payload group).
INLINE_FALLBACK_BYTES = 512 * 1024
#: Clear payloads kept in memory per process (replays decode the same blobs again).
CACHE_BYTES = 64 * 1024 * 1024


class BlobError(CodecError):
    """A reference whose blob is missing or does not match its hash."""


class BlobStore(Protocol):
    """Where blobs live (parkgate.store.Repository implements it)."""

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
                    from parkgate.store.repository import Repository

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
        if payload.ByteSize() <= self.threshold:
            return payload
        try:
            return await self._by_reference(payload)
        except BlobError:
            raise
        except Exception as exc:
            # The store is down: a payload Temporal still takes travels inline
            # (as before blobs) rather than failing an activity that already ran.
            if payload.ByteSize() > INLINE_FALLBACK_BYTES:
                raise
            log.warning("blob store unavailable (%s); a %d-byte payload travels inline",
                        type(exc).__name__, payload.ByteSize())
            return payload

    async def _by_reference(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") == JSON_ENCODING:
            # The same large string (a file's content) is in the workflow input,
            # classify's and execute's inputs...: store it once, by content.
            payload = await self._extract_strings(payload)
            if payload.ByteSize() <= self.threshold:
                return payload
        return await self._put(payload)

    async def _put(self, payload: Payload) -> Payload:
        raw = payload.SerializeToString()
        blob_id = hashlib.sha256(raw).hexdigest()
        sealed = self.sealer.encrypt(payload).SerializeToString()
        await self.store.put_blob(blob_id, sealed, len(raw), self.workflow_id)
        self._cache.put(blob_id, raw)
        return reference(blob_id, len(raw))

    async def _extract_strings(self, payload: Payload) -> Payload:
        """The JSON payload with each long string stored as a blob and blanked;
        where they were is listed in the metadata."""
        try:
            doc = json.loads(payload.data)
        except ValueError:
            return payload
        found: list[tuple[list[str | int], str]] = []
        for path, text in list(_long_strings(doc, [], self.threshold // 4)):
            ref = await self._put(Payload(metadata={"encoding": STRING_ENCODING},
                                          data=text.encode("utf-8")))
            found.append((path, ref.metadata[SHA_META].decode("ascii")))
            _set(doc, path, "")
        if not found:
            return payload
        out = Payload()
        out.CopyFrom(payload)
        out.metadata["encoding"] = STRINGS_ENCODING
        out.metadata[STRINGS_META] = json.dumps(found, separators=(",", ":")).encode()
        out.data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return out

    async def _decode_one(self, payload: Payload) -> Payload:
        encoding = payload.metadata.get("encoding")
        if encoding == BLOB_ENCODING:
            blob_id = payload.metadata.get(SHA_META, b"").decode("ascii", errors="replace")
            out = Payload()
            out.ParseFromString(await self._raw(blob_id))
            return await self._decode_one(out)
        if encoding == STRINGS_ENCODING:
            return await self._restore_strings(payload)
        return payload

    async def _raw(self, blob_id: str) -> bytes:
        raw = self._cache.get(blob_id)
        if raw is None:
            raw = await self.load(blob_id)
            self._cache.put(blob_id, raw)
        return raw

    async def _restore_strings(self, payload: Payload) -> Payload:
        doc = json.loads(payload.data)
        for path, blob_id in json.loads(payload.metadata[STRINGS_META]):
            text = Payload()
            text.ParseFromString(await self._raw(blob_id))
            _set(doc, path, text.data.decode("utf-8"))
        out = Payload()
        out.CopyFrom(payload)
        del out.metadata[STRINGS_META]
        out.metadata["encoding"] = JSON_ENCODING
        out.data = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
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


def _long_strings(
    value: Any, path: list[str | int], minimum: int
) -> Iterator[tuple[list[str | int], str]]:
    """(path, string) for every string value longer than `minimum` characters."""
    if isinstance(value, str):
        if len(value) > minimum and path:  # a whole-payload string is stored whole
            yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _long_strings(item, [*path, key], minimum)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _long_strings(item, [*path, index], minimum)


def _set(doc: Any, path: list[str | int], value: str) -> None:
    for step in path[:-1]:
        doc = doc[step]
    doc[path[-1]] = value


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
        from parkgate.durable.codec import EncryptionCodec

        return next((c for c in self.codecs if isinstance(c, EncryptionCodec)), None)
