"""The optional integrations stay unloaded until used (docs/PERFORMANCE.md, "Scale on
one machine"): an API without MCP clients, Slack or OIDC, and a store opened at head,
do not pay for the MCP SDK, slack-sdk/aiohttp, Authlib/joserfc, Alembic, or (without
webhooks) httpx. The worker's recipe is imported too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from parkgate.store.migrate import upgrade
from tests.fixtures.db import fresh_sqlite_url

OPTIONAL = ("mcp", "mcp_types", "slack_sdk", "aiohttp", "authlib", "joserfc", "alembic", "httpx")

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
