"""Payload encryption: every Temporal payload parkgate writes is AES-GCM encrypted.

Temporal's history holds tool inputs and outputs, which may contain
credentials; with this codec the Temporal server (and its database) only sees
ciphertext. Each encrypted payload names its key in the metadata
(`encryption-key-id`), so keys rotate: encrypt with the current key, decrypt
with any configured one.

A payload without the encrypted encoding (or sealed with an unknown key id,
or altered) was not written by a holder of the keys (a direct Temporal
client, a tool that reached the frontend) and is refused, unless it is a bare
scalar that can never be a message (`is_bare_scalar`: null, a short JSON
string, number or boolean, as the Temporal server writes in a cancellation's
details). Decoding never raises for it (a codec error fails the whole
workflow task and would wedge the call in a retry loop): it decodes to a
payload of the `REFUSED_ENCODING`, which only `RefusedPayloadConverter` reads,
to fail with the reason. So only that message fails: an update is rejected, a
signal dropped (the SDK logs it), an activity result or a workflow input
fails its task and nothing runs. Replayers and the codec server decode
plaintext as-is (`lenient()`): histories written before the codec keep
replaying and the Temporal UI shows markers.

The same keys prove messages (parkgate.approvals.proof): `proof_keys` derives one proof
key per payload key id, so the API signs with the current id and workers
verify with every configured one.

Keys come from settings (`payload_keys`: id -> urlsafe base64 of 32 bytes,
`payload_key_id`: the current id) or, for the embedded one-machine stack,
from `<data_dir>/payload-key` (`id:key`, generated 0600 on first use).
`data_converter(settings)` is the one place a DataConverter is built.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import EncodingPayloadConverter, PayloadCodec

from parkgate.approvals.proof import ProofKeys
from parkgate.payload_keys import decode_key

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from parkgate.settings import Settings

ENCODING = b"binary/encrypted"
#: What a refused plaintext payload decodes to: no converter reads it.
REFUSED_ENCODING = b"binary/parkgate-refused-plaintext"
KEY_ID_META = "encryption-key-id"
KEY_FILE = "payload-key"
_NONCE = 12


class CodecError(ValueError):
    """A payload that cannot be decrypted: unknown key id or tampered data."""


def encode_key(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii")


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over the whole serialized payload; key id is the associated data."""

    def __init__(
        self, keys: Mapping[str, bytes], current: str, *, accept_plaintext: bool = False
    ) -> None:
        if current not in keys:
            raise ValueError(f"payload key id {current!r} is not among the configured keys")
        self._raw = dict(keys)
        self.current = current
        self.accept_plaintext = accept_plaintext
        #: The keys that prove messages to workflows (parkgate.approvals.proof), same ids.
        self.proof_keys = ProofKeys.from_secrets(keys, current)

    @cached_property
    def _keys(self) -> dict[str, AESGCM]:
        """One cipher per key id, made on the first payload: cryptography's
        bindings are about 8 MB resident, which an API at rest never needs."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        return {kid: AESGCM(raw) for kid, raw in self._raw.items()}

    def lenient(self) -> EncryptionCodec:
        """This codec, decoding plaintext payloads as they are (replayers of
        histories written before the codec, the Temporal UI's codec server)."""
        return EncryptionCodec(self._raw, self.current, accept_plaintext=True)

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
        """The clear payload. Strict: anything not sealed by one of our keys
        (plaintext, unknown key id, tampered) decodes to a refused payload;
        lenient: plaintext passes as-is, the rest raises CodecError."""
        if payload.metadata.get("encoding") != ENCODING:
            if self.accept_plaintext or is_bare_scalar(payload):
                return payload  # written before encryption, or no message at all
            encoding = payload.metadata.get("encoding", b"").decode("utf-8", "replace")
            return refused(f"a {encoding or 'bare'} payload not encrypted with a payload key")
        try:
            clear = self.open(payload)
        except CodecError as exc:
            if self.accept_plaintext:
                raise
            return refused(str(exc))
        out = Payload()
        out.ParseFromString(clear)
        return out

    def open(self, payload: Payload) -> bytes:
        """The clear serialized payload inside an encrypted one (CodecError if not ours)."""
        kid = payload.metadata.get(KEY_ID_META, b"").decode("utf-8", errors="replace")
        aes = self._keys.get(kid)
        if aes is None:
            raise CodecError(f"payload encrypted with unknown key id {kid!r}")
        from cryptography.exceptions import InvalidTag

        try:
            plain = aes.decrypt(payload.data[:_NONCE], payload.data[_NONCE:], kid.encode())
        except InvalidTag as exc:
            raise CodecError(f"payload with key id {kid!r} failed authentication") from exc
        return plain


#: The longest plaintext scalar a strict codec lets through.
_SCALAR_BYTES = 256


def is_bare_scalar(payload: Payload) -> bool:
    """A plaintext payload that cannot be a message: null, or a short JSON
    string/number/boolean. The Temporal server writes such details itself (an
    activity cancelled before it started carries "ACTIVITY_ID_NOT_STARTED");
    every parkgate update, signal, input and result is a pydantic model,
    which a scalar never converts to, so letting these through forges nothing.
    """
    encoding = payload.metadata.get("encoding")
    if encoding == b"binary/null":
        return not payload.data
    if encoding != b"json/plain" or len(payload.data) > _SCALAR_BYTES:
        return False
    try:
        value = json.loads(payload.data)
    except ValueError:
        return False
    return not isinstance(value, (dict, list))


def refused(why: str) -> Payload:
    """What a payload a strict codec refuses decodes to: unreadable by any
    converter, so its message alone fails (never the whole workflow task)."""
    return Payload(metadata={"encoding": REFUSED_ENCODING},
                   data=f"payload refused: {why}".encode())


class RefusedPayloadError(ValueError):
    """A payload the codec refused, met by a converter (the message says why)."""


class RefusedPayloadConverter(EncodingPayloadConverter):
    """Reads the `REFUSED_ENCODING` only to fail with the codec's reason (an
    update's rejection, the dropped signal's log line and a wedged task's
    diagnosis then say why); never encodes anything."""

    @property
    def encoding(self) -> str:
        return REFUSED_ENCODING.decode()

    def to_payload(self, value: object) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> object:
        raise RefusedPayloadError(payload.data.decode("utf-8", errors="replace"))


class ParkgatePayloadConverter(PydanticPayloadConverter):
    """The pydantic converter, plus the refused-payload reader."""

    def __init__(self) -> None:
        super().__init__()
        self._set_converters(*self.converters.values(), RefusedPayloadConverter())


#: The pydantic data converter with parkgate's payload converter (no codec yet).
PARKGATE_CONVERTER = dataclasses.replace(
    pydantic_data_converter, payload_converter_class=ParkgatePayloadConverter
)


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
