"""The approver inbox in headless Chromium: phone (375 px) and desktop widths,
live updates over SSE, approving in place, and the same without JavaScript.

Screenshots go to `test-output/inbox/` (git-ignored; PARKGATE_TEST_OUTPUT
overrides) so a reviewer can look at them after the run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig
from tests.browser.test_approval_page import served

pytestmark = pytest.mark.browser

PHONE = {"width": 375, "height": 812}
DESKTOP = {"width": 1280, "height": 800}
OUTPUT = Path(os.environ.get("PARKGATE_TEST_OUTPUT")
              or Path(__file__).resolve().parents[2] / "test-output") / "inbox"


def shot_path(name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT / name


async def new_page(browser: Browser, viewport: dict[str, int], *, js: bool = True) -> Page:
    phone = viewport["width"] < 600
    context = await browser.new_context(
        viewport=viewport, device_scale_factor=2 if phone else 1, is_mobile=phone,
        has_touch=phone, java_script_enabled=js,
    )
    return await context.new_page()


async def sign_in(page: Page, api: ApiRig) -> None:
    await page.goto(f"{api.base_url}/inbox")
    await expect(page.locator("h1")).to_have_text("Approver inbox")
    await page.get_by_label("API key").fill(api.human_key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_test_id("count")).to_be_visible()


async def park(api: ApiRig, sid: str, call_id: str, path: str, content: str) -> str:
    await api.submit(sid, "write_file", {"path": path, "content": content}, call_id=call_id)
    return str((await api.wait_parked(sid, call_id))["request_id"])


async def no_overflow(page: Page) -> None:
    width, inner = await page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner, f"horizontal scroll: scrollWidth={width} > innerWidth={inner}"


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
async def test_inbox_live_and_approve_in_place(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
    viewport: dict[str, int],
) -> None:
    tag = str(viewport["width"])
    async with served(dev_temporal, sqlite_repo, tmp_path) as api:
        sid = await api.register()
        (api.workspace / "notes.txt").write_text("first line\nold second line\n")
        first = await park(api, sid, "toolu_i1", "notes.txt", "first line\nnew second line\n")
        page = await new_page(browser, viewport)
        await sign_in(page, api)
        item = page.locator(f'[data-rid="{first}"]')
        await expect(item).to_be_visible()
        await expect(item.locator(".diff .d-add")).to_contain_text("+new second line")
        await expect(item.get_by_test_id("rule")).not_to_have_text("—")
        await expect(page.locator("#live")).to_have_attribute("data-state", "live")
        await no_overflow(page)
        # Big tap targets, inside the screen.
        box = await item.get_by_test_id("approve").bounding_box()
        assert box is not None and box["height"] >= 44
        assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]
        await page.screenshot(path=str(shot_path(f"inbox-{tag}-one.png")), full_page=True)
        # A second call parks: the list updates without a reload.
        second = await park(api, sid, "toolu_i2", "other.txt", "hello\n")
        await expect(page.get_by_test_id("item")).to_have_count(2, timeout=15_000)
        await expect(page.get_by_test_id("item").first).to_have_attribute("data-rid", second)
        await expect(page.get_by_test_id("count")).to_have_text("2 waiting for you")
        await no_overflow(page)
        await page.screenshot(path=str(shot_path(f"inbox-{tag}-two.png")), full_page=True)
        # Approve the first in place: back on the inbox with a flash, one item left.
        await item.get_by_test_id("approve").click()
        await expect(page.get_by_test_id("flash")).to_contain_text(
            "You approved write_file (toolu_i1)")
        await expect(page.get_by_test_id("item")).to_have_count(1)
        await no_overflow(page)
        await page.screenshot(path=str(shot_path(f"inbox-{tag}-approved.png")), full_page=True)
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_i1",
                                  params={"wait": 20})
        assert done.json()["status"] == "succeeded" and done.json()["via"] == "inbox"
        assert (api.workspace / "notes.txt").read_text() == "first line\nnew second line\n"
        # Decided elsewhere (the API): the list drops it live.
        r = await api.http.post(
            f"/v1/sessions/{sid}/turns/t1/confirmations/{second}",
            json={"decision": "deny", "reason": "not now"})
        assert r.status_code == 200, r.text
        await expect(page.get_by_test_id("empty")).to_be_visible(timeout=15_000)
        for name in ("one", "two", "approved"):
            assert shot_path(f"inbox-{tag}-{name}.png").stat().st_size > 10_000


async def test_inbox_without_javascript(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, sqlite_repo, tmp_path) as api:
        sid = await api.register()
        (api.workspace / "n.txt").write_text("old\n")
        rid = await park(api, sid, "toolu_nj", "n.txt", "new\n")
        page = await new_page(browser, PHONE, js=False)
        await sign_in(page, api)
        await expect(page.locator("#live")).to_have_text("Reload to see new requests.")
        # Filters are a plain GET form.
        await page.locator("summary", has_text="Filters").click()
        await page.get_by_label("Session").fill("no-such-session")
        await page.get_by_role("button", name="Apply").click()
        await expect(page.get_by_test_id("empty")).to_be_visible()
        await page.get_by_role("link", name="Clear").click()
        item = page.locator(f'[data-rid="{rid}"]')
        await item.locator("summary", has_text="Approve with edits").click()
        await item.get_by_label("Edited arguments (JSON)").fill(
            '{"path": "n.txt", "content": "edited\\n"}')
        await item.get_by_test_id("approve-edits").click()
        await expect(page.get_by_test_id("flash")).to_contain_text("with your edits")
        await no_overflow(page)
        await page.screenshot(path=str(shot_path("inbox-375-nojs.png")), full_page=True)
        # The reload link is the no-JS refresh; the flash was shown once.
        await page.get_by_test_id("reload").click()
        await expect(page.get_by_test_id("empty")).to_be_visible()
        assert await page.get_by_test_id("flash").count() == 0
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_nj",
                                  params={"wait": 20})
        assert done.json()["status"] == "succeeded"
        assert (api.workspace / "n.txt").read_text() == "edited\n"
