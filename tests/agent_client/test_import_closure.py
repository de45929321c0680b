"""An agent embedding the client loads none of the server.

Each check imports the library in a fresh interpreter and reads `sys.modules`:
the import closure that really loads, not the one the source seems to declare
(a package `__init__` that pulls in the app shows up here). `.importlinter`
holds the same rule for parkgate's own modules (agent-client-alone, and
adapters-over-client for the framework adapters, which stand on the client);
this also catches a third-party library dragged in.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Server-side libraries an agent process must not pay for.
SERVER_LIBRARIES = frozenset({
    "fastapi", "starlette", "uvicorn", "sse_starlette", "temporalio", "sqlalchemy",
    "asyncpg", "psycopg", "alembic", "slack_sdk", "mcp", "cedarpy", "prometheus_client",
    "jinja2",
})
#: parkgate's server packages.
SERVER_PACKAGES = ("api", "cli", "runtime", "workflows", "activities", "channels",
                   "durable", "store", "mcp_source", "pipeline", "sandbox")


def loaded_by(*statements: str) -> set[str]:
    """The module names a fresh interpreter holds after running `statements`."""
    code = "\n".join([*statements, "import json, sys", "print(json.dumps(sorted(sys.modules)))"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def server_modules(modules: set[str]) -> list[str]:
    """The server's modules (parkgate's and third-party) among `modules`."""
    server = {f"parkgate.{name}" for name in SERVER_PACKAGES}
    return sorted(
        name for name in modules
        if (name.split(".")[0] in SERVER_LIBRARIES)
        or ".".join(name.split(".")[:2]) in server
    )


def test_the_agent_client_loads_no_server_module() -> None:
    modules = loaded_by("import parkgate.agent_client",
                        "from parkgate.agent_client import gate, ParkgateClient")
    assert "parkgate.agent_client.sync" in modules  # the import did happen
    assert "parkgate.calls.wire" in modules  # the models both sides read
    assert server_modules(modules) == []

