"""The optional integrations stay unloaded until used (docs/PERFORMANCE.md, "Scale on
one machine" and "At rest"): an API without MCP clients, Slack or OIDC, and a store opened
at head, do not pay for the MCP SDK, slack-sdk/aiohttp, Authlib/joserfc, Alembic, (without
webhooks) httpx, or (without policy_files) cedarpy. The worker's recipe is imported too.
`parkgate api` loads no worker part, no page template engine before a page is asked for,
none of the other CLI commands' modules, and not typer (its plain options are parsed
without it); jsonschema loads with the first input validated, prometheus_client with the
first count or scrape."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from parkgate.store.migrate import upgrade
from tests.fixtures.db import fresh_sqlite_url

OPTIONAL = ("mcp", "mcp_types", "slack_sdk", "aiohttp", "authlib", "joserfc", "alembic", "httpx",
            "cedarpy")

PROBE = """
import asyncio, sys
from parkgate.api.assemble import api_app
from parkgate.runtime.worker import build_deps
from parkgate.store import Repository

async def main() -> None:
    repo = await Repository.connect(sys.argv[1], check_schema=True)
    await repo.close()

asyncio.run(main())
print(",".join(sorted(m for m in {optional!r} if m in sys.modules)))
"""


def test_app_and_store_at_head_load_no_optional_package(tmp_path: Path) -> None:
    url = fresh_sqlite_url(tmp_path)
    upgrade(url)
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(optional=OPTIONAL), url],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert out.stdout.strip() == ""


#: The worker's side: `parkgate api` serves definitions, it runs no tool, and it is
#: a Temporal client only (no worker package: parkgate.durable.client_plugin).
WORKER_ONLY = ("cedarpy", "websockets", "parkgate.workflows", "parkgate.activities",
               "parkgate.pipeline", "parkgate.runtime.worker", "parkgate.rules.cedar",
               "temporalio.worker", "temporalio.plugin", "parkgate.durable.plugin")
#: Loaded on first use: Jinja2 with the first page, the other commands' modules
#: (YAML, rich: its console too, the policy checks) when they run, jsonschema
#: with the first input validated (parkgate's own tools register without it),
#: prometheus_client with the first count or scrape.
FIRST_USE = ("jinja2", "yaml", "rich", "parkgate.cli.policy",
             "parkgate.cli.serve", "parkgate.rules.policy", "jsonschema", "referencing",
             "rpds", "prometheus_client", "parkgate.api.shared.metric_families")

API_PROBE = """
import asyncio, sys
import click, typer
from parkgate.cli.root import app
group = typer.main.get_command(app)
assert group.get_command(click.Context(group), "api") is not None  # `parkgate api`
from parkgate.api.assemble import api_app
from parkgate.durable.connect import connect
import parkgate.api.app
from parkgate.runtime.embedded import run_api
from parkgate.runtime.http_server import api_server
from parkgate.runtime.tool_registry import tool_registry
from parkgate.settings import Settings

async def asgi(scope, receive, send) -> None:
    pass

registry = asyncio.run(tool_registry(Settings(mcp_servers=dict())))
api_server(asgi).config.load()  # uvicorn picks its protocols here
print(len(registry.names()))
print(",".join(sorted(m for m in {worker_only!r} if m in sys.modules)))
"""

PAGE_PROBE = """
import sys
from parkgate.api.shared.views import make_templates
templates = make_templates()
before = "jinja2" in sys.modules
print(before, type(templates.jinja).__name__, "jinja2" in sys.modules)
"""


def test_the_api_process_loads_no_worker_part(tmp_path: Path) -> None:
    # `parkgate api` builds the tools' registry, not the worker's pipeline (no
    # policy, Cedar, sandbox, activities or workflows), and serves no WebSocket.
    out = subprocess.run(
        [sys.executable, "-c", API_PROBE.format(worker_only=WORKER_ONLY + FIRST_USE)],
        capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path,
        env={**os.environ, "PARKGATE_DATA_DIR": str(tmp_path / "data")},
    )
    tools, loaded = out.stdout.split("\n")[:2]
    assert int(tools) > 0  # the built-in tools are there
    assert loaded == ""


def test_the_templates_load_with_the_first_page() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PAGE_PROBE], capture_output=True, text=True, timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["False", "Jinja2Templates", "True"]


SCHEMA_PROBE = """
import sys
from parkgate.runtime.tool_registry import build_registry
registry = build_registry()
before = "jsonschema" in sys.modules
from parkgate.schema import validate_input
errors = validate_input(registry.get("read_file").input_schema, {"path": 3})
print(before, "jsonschema" in sys.modules, errors)
"""


METRICS_PROBE = """
import sys
import parkgate.api.app
from parkgate.api.shared import metrics
before = "prometheus_client" in sys.modules
metrics.count_submission("no-such-tool")
body, content_type = metrics.render()
line = [l for l in body.decode().splitlines() if l.startswith("parkgate_api_tool_calls_sub")][0]
print(before, "prometheus_client" in sys.modules, line, metrics.REGISTRY is not None)
"""


def test_prometheus_client_loads_with_the_first_count() -> None:
    out = subprocess.run(
        [sys.executable, "-c", METRICS_PROBE], capture_output=True, text=True, timeout=60,
        check=True,
    )
    assert out.stdout.split() == [
        "False", "True", 'parkgate_api_tool_calls_submitted_total{tool="unknown"}', "1.0", "True"]


def test_jsonschema_loads_with_the_first_input_validated() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCHEMA_PROBE], capture_output=True, text=True, timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "False True [\"$.path: 3 is not of type 'string'\"]"


def _api_process(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`parkgate api` started by `argv` in a data dir with no database: it stops at
    start with its one error line (exit 1), after the imports it serves with."""
    from parkgate.runtime.ports import LOCALHOST, free_port

    clean = {k: v for k, v in os.environ.items() if not k.startswith("PARKGATE_")}
    return subprocess.run(
        [*argv, "api", "--host", LOCALHOST, f"--port={free_port(LOCALHOST)}",
         "--connect-timeout", "0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**clean, "PARKGATE_DATA_DIR": str(tmp_path / "data"), "PYTHONPROFILEIMPORTTIME": "1",
             "PARKGATE_TEMPORAL_ADDRESS": "127.0.0.1:9", **env},
    )


def _said(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split(" (Temporal")[0].split("http://")[0] for line in proc.stderr.splitlines()
            if not line.startswith("import time:")]


def _imported(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:")}


def test_parkgate_api_runs_without_typer_and_fails_as_the_typer_command_does(
    tmp_path: Path,
) -> None:
    # parkgate.cli.main serves `parkgate api` with plain options without typer
    # (parkgate.cli.api_cmd.run_argv); the typer command (parkgate.cli.root.main)
    # is what it was. Both end the same way: a store that is not migrated, exit 1,
    # and invalid settings, exit 2.
    plain = [sys.executable, "-c", "from parkgate.cli import main; main()"]
    typed = [sys.executable, "-c", "from parkgate.cli.root import main; main()"]
    for env, code, needle in (({}, 1, "is not migrated"),
                              ({"PARKGATE_SESSION_CONCURRENCY": "0"}, 2, "session_concurrency")):
        fast, full = _api_process(plain, tmp_path, **env), _api_process(typed, tmp_path, **env)
        assert (fast.returncode, full.returncode) == (code, code), fast.stderr[-2000:]
        assert _said(fast) == _said(full)
        assert needle in _said(fast)[-1] and _said(fast)[-1].startswith("parkgate: error: ")
        assert not {"typer", "parkgate.cli.root"} & _imported(fast)
        assert {"typer", "parkgate.cli.root"} <= _imported(full)
