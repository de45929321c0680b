"""parkgate.durable.converter: a converter bound to a context is the SDK's copy,
made without building converters it throws away."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    WorkflowSerializationContext,
)

from parkgate.durable import codec as codec_module
from parkgate.durable.blobs import BlobCodec, ChainCodec
from parkgate.durable.converter import ParkgateDataConverter, converter_with
from parkgate.models import TextBlock
from tests.fixtures.temporal import TEST_CODEC

WORKFLOW = WorkflowSerializationContext(namespace="default", workflow_id="call/s/t/1")
ACTIVITY = ActivitySerializationContext(
    namespace="default", workflow_id="call/s/t/2", workflow_type="parkgate.ToolCall",
    activity_type="parkgate.classify", activity_task_queue="q", is_local=True,
    activity_id="1",
)


class _MemoryBlobs:
    """Enough of a BlobStore for binding a codec (nothing is stored here)."""

    async def put_blob(self, sha: str, data: bytes) -> None:  # pragma: no cover
        raise AssertionError("not used")

    async def get_blob(self, sha: str) -> bytes | None:  # pragma: no cover
        raise AssertionError("not used")


def _parts(conv: DataConverter) -> dict[str, Any]:
    chain = conv.payload_codec
    assert isinstance(chain, ChainCodec)
    blob = chain.codecs[0]
    assert isinstance(blob, BlobCodec)
    return {
        "types": [type(conv.payload_converter), type(conv.failure_converter), type(chain)],
        "codecs": [type(c) for c in chain.codecs],
        "workflow_id": blob.workflow_id,
        "fields": {name: getattr(conv, name) for name in
                   ("payload_converter_class", "failure_converter_class")},
    }


@pytest.mark.parametrize("context", [WORKFLOW, ACTIVITY], ids=["workflow", "activity"])
async def test_bound_copy_is_the_sdks(context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conv = converter_with(TEST_CODEC, _MemoryBlobs(), threshold=1024)  # type: ignore[arg-type]
    assert isinstance(conv, ParkgateDataConverter)
    sdk_copy = DataConverter.with_context(conv, context)  # the SDK's own way
    built = []
    original_init = codec_module.ParkgatePayloadConverter.__init__

    def counting_init(self: Any) -> None:
        built.append(self)
        original_init(self)

    monkeypatch.setattr(codec_module.ParkgatePayloadConverter, "__init__", counting_init)
    ours = conv.with_context(context)
    assert built == []  # nothing built to be thrown away
    assert isinstance(ours, ParkgateDataConverter) and ours is not conv
    assert _parts(ours) == _parts(sdk_copy)
    assert _parts(ours)["workflow_id"] == context.workflow_id
    assert _parts(conv)["workflow_id"] == ""  # the original is untouched
    # It converts and seals as the SDK's copy does, both ways.
    value = TextBlock(text="hello")
    encoded = await ours.encode([value])
    assert encoded[0].metadata["encoding"] == codec_module.ENCODING
    assert await sdk_copy.decode(encoded, [TextBlock]) == [value]
    assert await ours.decode(await sdk_copy.encode([value]), [TextBlock]) == [value]


def test_nothing_contextual_is_the_same_converter() -> None:
    plain = ParkgateDataConverter(payload_converter_class=codec_module.ParkgatePayloadConverter)
    assert plain.with_context(WORKFLOW) is plain
