"""The client refuses inputs JSON cannot carry before sending them, and runs a
claimed input only when it hashes to the released input_sha256 (parkgate.jcs)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parkgate.agent_client import AsyncParkgateClient, InvalidInputError, ParkgateClient
from parkgate.agent_client._gate_common import Claim
from parkgate.jcs import legacy_sha256_hex
from parkgate.models import input_sha256
from tests.api.rig import closed_port_url

BAD = {"id": "toolu_nan", "name": "read_file", "input": {"path": "a", "w": [1, float("nan")]}}


async def test_nan_is_refused_before_sending() -> None:
    # A closed port: had the client sent anything, it would fail to connect instead.
    async with AsyncParkgateClient(closed_port_url(), "k", retry_for=0) as client:
        with pytest.raises(InvalidInputError) as caught:
            await client.submit(BAD, "s1")
        assert caught.value.path == "input.w[1]"
        assert "NaN is not a JSON number" in str(caught.value)
        with pytest.raises(InvalidInputError, match="Infinity"):
            await client.dispatch_all([{**BAD, "input": {"x": float("inf")}}], "s1")
    with ParkgateClient(closed_port_url(), "k", retry_for=0) as sync_client, \
            pytest.raises(InvalidInputError):
        sync_client.submit(BAD, "s1")


def test_a_claim_runs_only_the_input_its_hash_names() -> None:
    released = {"ratio": 0.1, "big": 1e21, "one": 1.0}
    assert Claim(input=released, input_sha256=input_sha256(released)).input == released
    # Released by a worker before RFC 8785: its json.dumps hash still names it.
    old = legacy_sha256_hex(released)
    assert old is not None and old != input_sha256(released)
    assert Claim(input=released, input_sha256=old).input_sha256 == old
    with pytest.raises(ValidationError, match="does not hash to its input_sha256"):
        Claim(input={**released, "ratio": 0.2}, input_sha256=input_sha256(released))
