"""Headless Chromium (Debian's package, never downloaded) driven by Playwright.

Missing chromium: the browser tests skip locally and FAIL under CI=true.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright
from temporalio.client import Client

from parkgate.runtime.devserver import DevServer
from tests.fixtures.required import unavailable
from tests.fixtures.temporal import dev_client

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium_present() -> bool:
    return os.access(CHROMIUM, os.X_OK)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not _chromium_present():
        unavailable(f"chromium not installed at {CHROMIUM} (apt-get install -y chromium)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(scope="session")
async def dev_temporal(dev_server: DevServer) -> Client:
    return await dev_client(dev_server)
