"""Signing in with the company's identity provider, in headless Chromium:
the inbox offers the provider's sign-in, the provider's own page signs the
person in (authorization code + PKCE, state, nonce), they approve a parked
call in place, the audit page names the provider's subject, and sign-out ends
the session. A person removed from the approvers group is refused at their
next decision, after the provider re-asserts their claims."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.test_inbox import wait_status
from tests.browser.test_approval_page import served
from tests.browser.test_inbox_page import DESKTOP, new_page, park, shot_path
from tests.fixtures.oidc import IdP, running_idp

pytestmark = pytest.mark.browser

ALICE = {"email": "alice@example.com", "email_verified": True, "name": "Alice",
         "groups": ["approvers"]}


async def provider_sign_in(page: Page, idp: IdP, sub: str) -> None:
    """The provider's authorization form, as a person fills it in."""
    await page.wait_for_url(f"{idp.issuer}/oauth2/authorize**")
    await page.locator('input[name="sub"]').first.fill(sub)
    await page.get_by_role("button", name="Authorize").click()


async def test_sign_in_approve_audit_sign_out(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        async with served(dev_temporal, sqlite_repo, tmp_path, **idp.settings()) as api:
            sid = await api.register()
            (api.workspace / "notes.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_oidc1", "notes.txt", "new\n")
            page = await new_page(browser, DESKTOP)
            await page.goto(f"{api.base_url}/inbox")
            await page.get_by_test_id("oidc-signin").click()
            await provider_sign_in(page, idp, "alice-sub")
            await page.wait_for_url(f"{api.base_url}/inbox")
            item = page.locator(f'[data-rid="{rid}"]')
            await expect(item).to_be_visible()
            await expect(page.get_by_test_id("signout")).to_contain_text("alice@example.com")
            await page.screenshot(path=str(shot_path("oidc-inbox.png")))
            await item.get_by_test_id("approve").click()
            await expect(page.get_by_test_id("flash")).to_contain_text("You approved")
            call = await wait_status(api, sid, "toolu_oidc1")
            assert call["status"] == "succeeded" and call["decided_by"] == "alice@example.com"
            assert call["identity"]["subject"] == "alice-sub"
            # The audit pages take the same session (the group grants auditor too).
            await page.goto(f"{api.base_url}/audit")
            await page.locator("table a").first.click()
            await expect(page.get_by_test_id("identity")).to_have_text(
                f"signed in via {idp.issuer} as alice@example.com (sub alice-sub)")
            await expect(page.get_by_test_id("principal")).to_have_text("oidc:alice-sub")
            await page.get_by_test_id("signout").click()
            await expect(page.locator("h1")).to_have_text("Signed out")
            await page.goto(f"{api.base_url}/inbox")
            await expect(page.get_by_test_id("oidc-signin")).to_be_visible()


async def test_removed_group_is_refused_at_the_next_decision(
    browser: Browser, dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    with running_idp() as idp:
        idp.set_user("alice-sub", ALICE)
        # Every decision needs claims asserted within the last 30 s; the test
        # ages the session instead of waiting (tests.api.test_oidc.aged).
        async with served(dev_temporal, sqlite_repo, tmp_path,
                          **idp.settings(oidc_decision_max_age_seconds=30)) as api:
            sid = await api.register()
            (api.workspace / "notes.txt").write_text("old\n")
            rid = await park(api, sid, "toolu_oidc2", "notes.txt", "new\n")
            page = await new_page(browser, DESKTOP)
            await page.goto(f"{api.base_url}/inbox")
            await page.get_by_test_id("oidc-signin").click()
            await provider_sign_in(page, idp, "alice-sub")
            item = page.locator(f'[data-rid="{rid}"]')
            await expect(item).to_be_visible()
            idp.set_user("alice-sub", ALICE | {"groups": []})
            await age_session(page, api, 3600)
            await item.get_by_test_id("approve").click()
            await expect(page.locator("h1")).to_have_text("Confirm it is you")
            await page.get_by_test_id("signin-link").click()
            # Her provider confirms her again, no longer in the approvers group.
            await provider_sign_in(page, idp, "alice-sub")
            await expect(page.locator("h1")).to_have_text("No approver role")
            stored = await api.repo.get_approval(rid)
            assert stored is not None and stored.decision is None


async def age_session(page: Page, api: object, seconds: int) -> None:
    """Re-sign the browser's session cookie as if it were `seconds` old."""
    import time

    from itsdangerous import TimestampSigner, URLSafeTimedSerializer

    from parkgate.api.shared import oidc_sessions

    secret = api.app.state.secret  # type: ignore[attr-defined]
    cookies = await page.context.cookies()
    (cookie,) = [c for c in cookies if c["name"] == oidc_sessions.COOKIE]
    data = URLSafeTimedSerializer(secret, salt=oidc_sessions.SALT).loads(cookie["value"])

    class Earlier(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - seconds

    old = URLSafeTimedSerializer(secret, salt=oidc_sessions.SALT, signer=Earlier).dumps(data)
    await page.context.add_cookies([{**cookie, "value": old}])  # type: ignore[list-item]
