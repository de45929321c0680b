"""AES-GCM payload codec: every payload encrypted, key ids for rotation; payloads not
sealed by our keys refused (old plaintext ones read as-is by replayers)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from parkgate.durable.codec import (
    ENCODING,
    KEY_ID_META,
    PARKGATE_CONVERTER,
    REFUSED_ENCODING,
    CodecError,
    EncryptionCodec,
    RefusedPayloadError,
    codec_for,
    encode_key,
)
from parkgate.durable.converter import data_converter
from parkgate.models import TextBlock
from parkgate.settings import Settings

K1, K2 = os.urandom(32), os.urandom(32)


def plain(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{text}"'.encode())


async def test_roundtrip_hides_the_plaintext_and_names_the_key() -> None:
    codec = EncryptionCodec({"k1": K1}, "k1")
    [sealed] = await codec.encode([plain("sk-live-123")])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_META] == b"k1"
    assert b"sk-live-123" not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [plain("sk-live-123")]


async def test_rotation_decrypts_old_keys_and_encrypts_with_the_current() -> None:
    old = EncryptionCodec({"k1": K1}, "k1")
    [sealed_old] = await old.encode([plain("a")])
    rotated = EncryptionCodec({"k1": K1, "k2": K2}, "k2")
    [sealed_new] = await rotated.encode([plain("b")])
    assert sealed_new.metadata[KEY_ID_META] == b"k2"
    assert await rotated.decode([sealed_old, sealed_new]) == [plain("a"), plain("b")]
    [refused] = await old.decode([sealed_new])
    assert refused.metadata["encoding"] == REFUSED_ENCODING
    assert b"unknown key id 'k2'" in refused.data
    with pytest.raises(CodecError, match="unknown key id 'k2'"):
        await old.lenient().decode([sealed_new])


async def test_unencrypted_payloads_are_refused_without_raising() -> None:
    """A plaintext payload (a direct Temporal client without the keys) decodes to
    a payload no converter reads: only its message fails, never the workflow task."""
    codec = EncryptionCodec({"k1": K1}, "k1")
    forged = Payload(metadata={"encoding": b"json/plain"},
                     data=b'{"request_id": "r", "decision": "allow", "decided_by": "forged"}')
    [refused] = await codec.decode([forged])
    assert refused.metadata["encoding"] == REFUSED_ENCODING
    assert b"forged" not in refused.data
    with pytest.raises(RefusedPayloadError, match="not encrypted with a payload key"):
        PARKGATE_CONVERTER.payload_converter.from_payloads([refused], [TextBlock])


async def test_bare_scalars_pass_structured_plaintext_does_not() -> None:
    """The server's own details (a cancellation's "ACTIVITY_ID_NOT_STARTED") are
    plaintext scalars, which no parkgate message converts from; an object or a
    list (what a forged message needs) is refused."""
    codec = EncryptionCodec({"k1": K1}, "k1")
    scalars = [plain("ACTIVITY_ID_NOT_STARTED"), Payload(metadata={"encoding": b"binary/null"}),
               Payload(metadata={"encoding": b"json/plain"}, data=b"42")]
    assert await codec.decode(scalars) == scalars
    shaped = [Payload(metadata={"encoding": b"json/plain"}, data=b'{"request_id": "r"}'),
              Payload(metadata={"encoding": b"json/plain"}, data=b"[1]"),
              Payload(metadata={"encoding": b"json/plain"}, data=b'"' + b"x" * 300 + b'"'),
              Payload(metadata={"encoding": b"binary/plain"}, data=b"x")]
    decoded = await codec.decode(shaped)
    assert [p.metadata["encoding"] for p in decoded] == [REFUSED_ENCODING] * 4


async def test_a_lenient_codec_reads_plaintext_as_is() -> None:
    """Replayers of histories written before the codec, and the codec server."""
    codec = EncryptionCodec({"k1": K1}, "k1").lenient()
    assert await codec.decode([plain("legacy")]) == [plain("legacy")]


async def test_tampered_payload_is_refused() -> None:
    codec = EncryptionCodec({"k1": K1}, "k1")
    [sealed] = await codec.encode([plain("x")])
    sealed.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    [refused] = await codec.decode([sealed])
    assert refused.metadata["encoding"] == REFUSED_ENCODING
    with pytest.raises(CodecError, match="failed authentication"):
        await codec.lenient().decode([sealed])
    with pytest.raises(CodecError, match="failed authentication"):
        codec.open(sealed)  # what blobs are opened with


def test_embedded_default_key_is_generated_private_and_stable(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", link_secret="x")
    first = codec_for(settings)
    key_file = tmp_path / "data" / "payload-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert codec_for(settings).current == first.current
    assert [p.name for p in key_file.parent.iterdir()] == ["payload-key"]


async def test_settings_keys_win_and_the_converter_roundtrips_models(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, link_secret="x",
        payload_keys={"a": encode_key(K1), "b": encode_key(K2)}, payload_key_id="b",
    )
    assert codec_for(settings).current == "b"
    assert not (tmp_path / "payload-key").exists()
    converter = data_converter(settings)
    block = TextBlock(text="token=abc")
    payloads = await converter.encode([block])
    assert payloads[0].metadata[KEY_ID_META] == b"b" and b"token=abc" not in payloads[0].data
    assert await converter.decode(payloads, [TextBlock]) == [block]


def test_bad_keys_are_clear_settings_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="payload key 'a': a payload key must be 32 bytes"):
        Settings(data_dir=tmp_path, link_secret="x", payload_keys={"a": "c2hvcnQ="})
    with pytest.raises(ValueError, match="payload_key_id 'z' is not a key"):
        Settings(data_dir=tmp_path, payload_keys={"a": encode_key(K1)}, payload_key_id="z")


def test_cryptography_loads_with_the_first_payload_not_with_the_converter(
        tmp_path: Path) -> None:
    """An API at rest holds a converter but has sealed nothing: cryptography's
    bindings (about 8 MB resident) load with the first payload."""
    import subprocess
    import sys

    probe = (
        "import asyncio, sys\n"
        "from parkgate.durable.converter import data_converter\n"
        "from parkgate.settings import Settings\n"
        f"conv = data_converter(Settings(data_dir={str(tmp_path)!r}))\n"
        "print('cryptography' in sys.modules)\n"
        "from temporalio.api.common.v1 import Payload\n"
        "p = Payload(metadata={'encoding': b'json/plain'}, data=b'1')\n"
        "[sealed] = asyncio.run(conv.payload_codec.encode([p]))\n"
        "[back] = asyncio.run(conv.payload_codec.decode([sealed]))\n"
        "print('cryptography' in sys.modules, back.data == b'1')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split("\n")
    assert out[:2] == ["False", "True True"]
