"""Large payloads travel by reference: the blob codec over the real store (both backends)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from temporalio.api.common.v1 import Payload
from temporalio.converter import WorkflowSerializationContext

from parkgate.durable.blobs import BLOB_ENCODING, SHA_META, STRING_ENCODING, BlobCodec, BlobError
from parkgate.durable.codec import ENCODING, CodecError, EncryptionCodec
from parkgate.models import utcnow
from parkgate.store import CallStatus, CallUpdate, Repository
from parkgate.store.statements import BLOBS
from tests.fixtures.db import fresh_sqlite_url
from tests.fixtures.temporal import TEST_CODEC, blob_converter
from tests.store.helpers import call_events, finished, uid

THRESHOLD = 64 * 1024


def big_payload(size: int = 300_000, fill: str = "x") -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=f'"{fill * size}"'.encode())


def codec(repo: Repository, workflow_id: str = "") -> BlobCodec:
    base = BlobCodec(repo, TEST_CODEC, THRESHOLD)
    if not workflow_id:
        return base
    return base.with_context(WorkflowSerializationContext(namespace="default",
                                                           workflow_id=workflow_id))


async def test_round_trip_stores_once_and_sealed(repo: Repository) -> None:
    original = big_payload()
    blobs = codec(repo, "call/s/t")
    [ref] = await blobs.encode([original])
    assert ref.metadata["encoding"] == BLOB_ENCODING
    assert ref.ByteSize() < 300
    sha = ref.metadata[SHA_META].decode()
    assert sha == hashlib.sha256(original.SerializeToString()).hexdigest()
    # The same content again (another payload, another workflow): still one blob.
    [again] = await codec(repo, "call/s/u").encode([original])
    assert again.metadata[SHA_META].decode() == sha
    assert await repo.blob_ids() == [sha]
    stored = await repo.get_blob(sha)
    assert stored is not None and b"xxxxxxxx" not in stored  # sealed with the payload key
    # A fresh codec (empty cache, another process) reads it back from the store.
    [back] = await codec(repo).decode([ref])
    assert back == original


def json_payload(value: object) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"},
                   data=json.dumps(value, separators=(",", ":")).encode())


async def test_a_long_string_is_stored_once_across_payloads(repo: Repository) -> None:
    """The content of a write travels in several payloads; the database holds it once."""
    content = "line of a big file\n" * 20_000
    start = json_payload({"call": {"input": {"path": "a.txt", "content": content}}})
    execute = json_payload({"prepared": {"input": {"path": "a.txt", "content": content},
                                         "edited": [content, "small"]}, "n": 1.5})
    blobs = codec(repo, "call/s/t")
    refs = await blobs.encode([start, execute])
    assert all(r.ByteSize() < 4096 for r in refs)
    [only] = await repo.blob_ids()  # one blob: the string, shared
    assert only == hashlib.sha256(
        Payload(metadata={"encoding": STRING_ENCODING}, data=content.encode())
        .SerializeToString()).hexdigest()
    back = await codec(repo).decode(refs)
    assert [json.loads(p.data) for p in back] == [json.loads(start.data),
                                                   json.loads(execute.data)]
    assert [p.metadata["encoding"] for p in back] == [b"json/plain", b"json/plain"]
    # Many short strings that are large together: the payload is stored whole.
    many = json_payload([f"{i:06d}" * 2000 for i in range(100)])
    [ref] = await blobs.encode([many])
    assert ref.metadata["encoding"] == BLOB_ENCODING
    assert await codec(repo).decode([ref]) == [many]


async def test_small_and_foreign_payloads_pass_unchanged(repo: Repository) -> None:
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'{"a": 1}')
    encrypted = TEST_CODEC.encrypt(small)  # an old history's payload: not a reference
    assert await codec(repo).encode([small]) == [small]
    assert await codec(repo).decode([encrypted, small]) == [encrypted, small]
    assert await repo.blob_ids() == []


async def test_tampered_blob_is_a_clear_error(repo: Repository) -> None:
    [ref] = await codec(repo).encode([big_payload(fill="a")])
    sha = ref.metadata[SHA_META].decode()
    # Replace the blob's content by another validly sealed payload: the hash check fails.
    other = TEST_CODEC.encrypt(big_payload(fill="b")).SerializeToString()
    async with repo.engine.begin() as conn:
        await conn.execute(update(BLOBS).where(BLOBS.c.id == sha).values(data=other))
    with pytest.raises(BlobError, match=f"blob {sha} is corrupt"):
        await codec(repo).decode([ref])


async def test_missing_blob_and_wrong_key_are_clear_errors(repo: Repository) -> None:
    [ref] = await codec(repo).encode([big_payload()])
    other_key = EncryptionCodec({"other": b"k" * 32}, "other")
    with pytest.raises(CodecError, match="unknown key id"):
        await BlobCodec(repo, other_key, THRESHOLD).decode([ref])
    missing = Payload(metadata={"encoding": BLOB_ENCODING, SHA_META: b"0" * 64})
    with pytest.raises(BlobError, match="not in the history store"):
        await codec(repo).decode([missing])


async def test_converter_puts_blob_before_encryption(repo: Repository) -> None:
    converter = blob_converter(repo)
    [outer] = await converter.encode(["y" * 200_000])
    assert outer.metadata["encoding"] == ENCODING  # what Temporal sees: encrypted
    assert outer.ByteSize() < 1024
    assert await converter.decode([outer], [str]) == ["y" * 200_000]


async def test_prune_removes_unreferenced_blobs_only(repo: Repository) -> None:
    sid = uid("s")
    old = utcnow() - timedelta(days=100)
    await repo.apply(call_events(sid, "gone"), finished(sid, "gone", finished_at=old,
                                                        created_at=old))
    # Still parked: retained however old (prune only removes finished calls).
    await repo.apply(call_events(sid, "kept"),
                     CallUpdate(session_id=sid, tool_use_id="kept", status=CallStatus.PARKED))
    [gone] = await codec(repo, f"call/{sid}/gone").encode([big_payload(fill="g")])
    [kept] = await codec(repo, f"call/{sid}/kept").encode([big_payload(fill="k")])
    [turn] = await codec(repo, f"turn/{sid}/abc").encode([big_payload(fill="t")])
    [shared] = await codec(repo, f"call/{sid}/gone").encode([big_payload(fill="s")])
    await codec(repo, f"call/{sid}/kept").encode([big_payload(fill="s")])
    [orphan] = await codec(repo).encode([big_payload(fill="o")])
    ids = {p.metadata[SHA_META].decode(): name for name, p in
           [("gone", gone), ("kept", kept), ("turn", turn), ("shared", shared),
            ("orphan", orphan)]}
    # Young blobs are safe whatever refers to them (a call being started has no row).
    assert await repo.prune(timedelta(days=90)) == 1
    assert len(await repo.blob_ids()) == 5
    # Later: the old call is gone; its blob and the context-less one go, the
    # retained call's, the shared one and its session's turn stay.
    await repo.prune(timedelta(days=90), now=utcnow() + timedelta(days=91))
    left = {ids[i] for i in await repo.blob_ids()}
    assert left == {"kept", "turn", "shared"}
    [back] = await codec(repo).decode([kept])
    assert back == big_payload(fill="k")


async def test_store_down_small_enough_payloads_travel_inline(tmp_path: Path) -> None:
    """A database that cannot take blobs (here: never migrated) must not fail a call
    whose payload Temporal still accepts; a payload it cannot carry is an error."""
    async with await Repository.connect(fresh_sqlite_url(tmp_path)) as broken:
        medium = big_payload(200_000)
        assert await BlobCodec(broken, TEST_CODEC, THRESHOLD).encode([medium]) == [medium]
        with pytest.raises(Exception, match="no such table"):
            await BlobCodec(broken, TEST_CODEC, THRESHOLD).encode([big_payload(600_000)])
