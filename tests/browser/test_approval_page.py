"""An approver on a phone: open the link, see the diff, approve or deny."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server

pytestmark = pytest.mark.browser

PHONE = {"width": 375, "height": 812}


@asynccontextmanager
async def served(
    client: Client, repo: Repository, tmp_path: Path, **settings: Any
) -> AsyncIterator[ApiRig]:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(client, repo, tmp_path, base_url=base, **settings) as api, \
            live_server(api.app, sock):
        yield api


async def parked_write(api: ApiRig, call_id: str, path: str, content: str) -> dict:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": path, "content": content}, call_id=call_id)
    parked = await api.wait_parked(sid, call_id)
    parked["sid"] = sid
    return parked


async def phone_page(browser: Browser) -> Page:
    context = await browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True,
                                        has_touch=True)
    return await context.new_page()


async def test_approve_from_a_phone(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as api:
        (api.workspace / "notes.txt").write_text("first line\nold second line\n")
        parked = await parked_write(api, "toolu_b1", "notes.txt",
                                    "first line\nnew second line\n")
        page = await phone_page(browser)
        await page.goto(parked["approval_url"])
        await expect(page.locator("h1")).to_contain_text("write_file")
        await expect(page.locator(".diff .d-add")).to_contain_text("+new second line")
        await expect(page.locator(".diff .d-del")).to_contain_text("-old second line")
        await expect(page.get_by_test_id("state")).to_have_text("Waiting for a decision")
        # 375 px: no horizontal scroll, the approve button visible without scrolling.
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, f"horizontal scroll: scrollWidth={width}"
        box = await page.get_by_test_id("approve").bounding_box()
        assert box is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= 375
        assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"], box
        shot = tmp_path / "approve-375.png"
        await page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        await page.get_by_label("Your name").fill("Alice")
        await page.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("outcome")).to_contain_text("You approved this call")
        done = await api.http.get(f"/v1/sessions/{parked['sid']}/tool-calls/toolu_b1",
                                  params={"wait": 20})
        assert done.json()["status"] == "succeeded" and done.json()["claimed_name"] == "Alice"
        assert (api.workspace / "notes.txt").read_text() == "first line\nnew second line\n"
        # Reloading shows who decided, and no form.
        await page.reload()
        await expect(page.get_by_test_id("outcome")).to_contain_text(
            "Alice (name given on the link, not verified) approved")
        assert await page.get_by_test_id("approve").count() == 0
        await page.context.close()


async def test_deny_with_a_reason_reaches_the_model(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as api:
        parked = await parked_write(api, "toolu_b2", "secret.txt", "do not write\n")
        page = await phone_page(browser)
        await page.goto(parked["approval_url"])
        await page.get_by_label("Your name").fill("Bob")
        await page.get_by_label("Reason").fill("use the staging bucket instead")
        await page.get_by_test_id("deny").click()
        await expect(page.get_by_test_id("outcome")).to_contain_text("You denied this call")
        done = await api.http.get(f"/v1/sessions/{parked['sid']}/tool-calls/toolu_b2",
                                  params={"wait": 20})
        result = done.json()["result"]
        assert done.json()["status"] == "denied" and result["is_error"] is True
        assert "use the staging bucket instead" in result["content"][0]["text"]
        assert not (api.workspace / "secret.txt").exists()
        await page.context.close()


async def test_opening_the_link_leaves_the_call_parked(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as api:
        parked = await parked_write(api, "toolu_b3", "x.txt", "x\n")
        page = await phone_page(browser)
        for _ in range(2):  # an unfurler's prefetch, then the human
            response = await page.goto(parked["approval_url"])
            assert response is not None and response.status == 200
        status = await api.http.get(f"/v1/sessions/{parked['sid']}/tool-calls/toolu_b3")
        assert status.status_code == 202 and status.json()["status"] == "parked"
        approval = await api.repo.get_approval(parked["request_id"])
        assert approval is not None and approval.decision is None
        # A tampered link is a clear 403 page.
        response = await page.goto(parked["approval_url"] + "x")
        assert response is not None and response.status == 403
        await expect(page.get_by_test_id("message")).to_contain_text("Invalid link")
        await page.context.close()
