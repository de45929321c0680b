"""Payload encryption: every Temporal payload parkgate writes is AES-GCM encrypted.

Temporal's history holds tool inputs and outputs, which may contain
credentials; with this codec the Temporal server (and its database) only sees
ciphertext. Each encrypted payload names its key in the metadata
(`encryption-key-id`), so keys rotate: encrypt with the current key, decrypt
with any configured one. Payloads without the encrypted encoding (histories
written before the codec) decode unchanged.

Keys come from settings (`payload_keys`: id -> urlsafe base64 of 32 bytes,
`payload_key_id`: the current id) or, for the embedded one-machine stack,
from `<data_dir>/payload-key` (`id:key`, generated 0600 on first use).
`data_converter(settings)` is the one place a DataConverter is built.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from parkgate.payload_keys import decode_key

if TYPE_CHECKING:
    from parkgate.durable.blobs import BlobStore
    from parkgate.settings import Settings

ENCODING = b"binary/encrypted"
KEY_ID_META = "encryption-key-id"
KEY_FILE = "payload-key"
_NONCE = 12


class CodecError(ValueError):
    """A payload that cannot be decrypted: unknown key id or tampered data."""


def encode_key(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload; key id is the associated data."""

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if current not in keys:
            raise ValueError(f"payload key id {current!r} is not among the configured keys")
        self._keys = {kid: AESGCM(raw) for kid, raw in keys.items()}
        self.current = current

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        kid = self.current.encode("utf-8")
        nonce = os.urandom(_NONCE)
        sealed = self._keys[self.current].encrypt(nonce, payload.SerializeToString(), kid)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID_META: kid}, data=nonce + sealed
        )

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption: readable as-is
        out = Payload()
        out.ParseFromString(self.open(payload))
        return out

    def open(self, payload: Payload) -> bytes:
        """The clear serialized payload inside an encrypted one (CodecError if not ours)."""
        kid = payload.metadata.get(KEY_ID_META, b"").decode("utf-8", errors="replace")
        aes = self._keys.get(kid)
        if aes is None:
            raise CodecError(f"payload encrypted with unknown key id {kid!r}")
        try:
            plain = aes.decrypt(payload.data[:_NONCE], payload.data[_NONCE:], kid.encode())
        except InvalidTag as exc:
            raise CodecError(f"payload with key id {kid!r} failed authentication") from exc
        return plain


def load_or_create_key_file(data_dir: os.PathLike[str] | str) -> tuple[str, bytes]:
    """The embedded default key: `<data_dir>/payload-key`, created 0600 when missing."""
    path = os.path.join(os.fspath(data_dir), KEY_FILE)
    if not os.path.exists(path):
        os.makedirs(os.fspath(data_dir), mode=0o700, exist_ok=True)
        kid = "local-" + secrets.token_hex(4)
        # Write aside, then link into place: a racing process of the same stack
        # either wins (we read theirs) or never sees a half-written file.
        scratch = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{kid}:{encode_key(os.urandom(32))}\n")
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(scratch)
    with open(path) as fh:
        kid, _, text = fh.read().strip().partition(":")
    return kid, decode_key(text)


def codec_for(settings: Settings) -> EncryptionCodec:
    """The codec the settings describe (keys from settings, else the data-dir key)."""
    if settings.payload_keys:
        keys = {kid: decode_key(text) for kid, text in settings.payload_keys.items()}
        current = settings.payload_key_id or next(iter(keys))
        return EncryptionCodec(keys, current)
    kid, raw = load_or_create_key_file(settings.data_dir)
    return EncryptionCodec({kid: raw}, kid)


def converter_with(
    codec: EncryptionCodec, blobs: BlobStore | None = None, *, threshold: int = 65536
) -> DataConverter:
    """The pydantic data converter with `codec` on every payload.

    With `blobs`, payloads larger than `threshold` bytes are first stored there
    and replaced by a reference (parkgate.durable.blobs), then everything is encrypted.
    """
    if blobs is None:
        return dataclasses.replace(pydantic_data_converter, payload_codec=codec)
    from parkgate.durable.blobs import BlobCodec, ChainCodec

    chain = ChainCodec([BlobCodec(blobs, codec, threshold), codec])
    return dataclasses.replace(pydantic_data_converter, payload_codec=chain)


def data_converter(settings: Settings, blobs: BlobStore | None = None) -> DataConverter:
    """The one DataConverter for clients, workers and replayers of these settings.

    Large payloads go to `blobs`, by default the history store of `settings`
    (opened on first use), so no Temporal payload nears its 2 MiB limit.
    """
    from parkgate.durable.blobs import LazyRepositoryBlobs

    store = blobs or LazyRepositoryBlobs(settings.effective_database_url)
    return converter_with(codec_for(settings), store, threshold=settings.blob_threshold_bytes)
