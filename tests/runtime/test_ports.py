"""free_port: a port a restarted server can take again."""

from __future__ import annotations

import collections
import socket
from pathlib import Path

import pytest

from parkgate.runtime import ports
from parkgate.runtime.ports import LOCALHOST, ephemeral_range, free_port, port_in_use


def test_free_ports_lie_below_the_kernels_ephemeral_range() -> None:
    span = ephemeral_range()
    if span is None:
        pytest.skip("this kernel does not say its ephemeral range")
    picked = {free_port() for _ in range(50)}
    assert all(ports.LOWEST_PICKED_PORT <= port < span[0] for port in picked), sorted(picked)
    assert len(picked) == 50  # no port handed out twice in a row of picks


def test_a_picked_port_binds_and_a_listening_one_is_never_picked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind((LOCALHOST, port))
        server.listen()
        assert port_in_use(LOCALHOST, port)
        # Every candidate is the busy port (not remembered as picked): the OS is asked instead.
        monkeypatch.setattr(ports, "_recently_picked", collections.deque(maxlen=8))
        monkeypatch.setattr(ports.random, "randrange", lambda _low, _high: port)
        other = free_port()
    assert other != port


def test_without_a_known_range_the_os_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert ephemeral_range() is None
    port = free_port()
    assert not port_in_use(LOCALHOST, port)
