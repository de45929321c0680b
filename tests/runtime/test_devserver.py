"""The embedded dev-server launcher: real `temporal` binary, state in a file."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from temporalio.client import Client

from parkgate.runtime.devserver import DevServer, DevServerError, temporal_binary

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(120)]


def test_command_uses_the_state_file_and_given_ports(tmp_path: Path) -> None:
    server = DevServer(tmp_path, port=17233, ui_port=18233, headless=False)
    cmd = server.command()
    assert cmd[0] == str(temporal_binary())
    assert cmd[1:3] == ["server", "start-dev"]
    assert cmd[cmd.index("--db-filename") + 1] == str(tmp_path / "temporal.db")
    assert cmd[cmd.index("--ip") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "17233"
    assert cmd[cmd.index("--ui-port") + 1] == "18233"
    assert "--headless" not in cmd
    assert "--headless" in DevServer(tmp_path).command()


async def test_start_restart_stop(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "state")
    async with server:
        assert server.db_path.exists()
        client = await Client.connect(server.address)
        await client.count_workflows()
        port = server.port
        await server.restart()
        assert server.port == port
        client = await Client.connect(server.address)
        await client.count_workflows()
        proc = server.process
    assert proc is not None and proc.poll() is not None  # stopped cleanly


async def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = DevServer(tmp_path, port=taken.getsockname()[1], startup_timeout=30)
        with pytest.raises(DevServerError, match="already in use"):
            await server.start()
    assert server.process is None
