"""Approval links: GET renders and changes nothing; POST decides (CSRF-safe)."""

from __future__ import annotations

import asyncio
import html
import logging
import re
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from parkgate.approvals.links import sign_token
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig, free_socket, live_server


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no csrf field"
    return html.unescape(match.group(1))


async def park_write(api: ApiRig, path: str = "new.txt", content: str = "hello\nworld\n",
                     call_id: str = "toolu_w") -> tuple[str, str, dict]:
    sid = await api.register()
    await api.submit(sid, "write_file", {"path": path, "content": content}, call_id=call_id)
    parked = await api.wait_parked(sid, call_id)
    path_only = parked["approval_url"].removeprefix(api.base_url)
    return sid, path_only, parked


async def test_get_renders_everything_and_changes_nothing(api: ApiRig) -> None:
    (api.workspace / "new.txt").write_text("hello\nold line\n")
    sid, link, parked = await park_write(api)
    for _ in range(3):  # an unfurler, a mail scanner, the human
        page = await api.http.get(link, headers={"Authorization": ""})
        assert page.status_code == 200
    text = page.text
    assert "write_file" in text and "write" in text
    assert 'class="d-add">+world' in text and 'class="d-del">-old line' in text
    assert "&#34;content&#34;" in text or "&quot;content&quot;" in text or '"content"' in text
    assert parked["rule"] and parked["rule"] in text
    assert "Waiting for a decision" in text and "Expires" in text
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w")
    assert still.json()["status"] == "parked"
    approval = await api.repo.get_approval(parked["request_id"])
    assert approval is not None and approval.decision is None


async def test_post_approves_once_and_shows_who_decided(api: ApiRig) -> None:
    sid, link, _ = await park_write(api)
    page = await api.http.get(link)
    token = csrf_of(page.text)
    r = await api.http.post(link, data={"csrf": token, "decision": "allow",
                                        "approver": "Alice", "reason": "ok"})
    assert r.status_code == 200, r.text
    assert "You approved this call" in r.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_w", params={"wait": 20})
    assert done.json()["status"] == "succeeded"
    # A generic link authenticates no one: the typed name is a claim.
    assert done.json()["decided_by"] is None and done.json()["claimed_name"] == "Alice"
    assert done.json()["via"] == "link" and done.json()["principal_id"] is None
    assert (api.workspace / "new.txt").read_text() == "hello\nworld\n"
    # A second decision from the same (stale) form loses and names the winner.
    again = await api.http.post(link, data={"csrf": token, "decision": "deny",
                                            "approver": "Bob"})
    assert again.status_code == 409
    assert "Already decided" in again.text and "Alice" in again.text
    # Re-opening the link shows the decision, no form.
    view = await api.http.get(link)
    assert view.status_code == 200
    claimed = "Alice (name given on the link, not verified)"
    assert f"{claimed} approved this call via link" in view.text
    assert 'name="csrf"' not in view.text


async def test_deny_with_reason_from_the_page(api: ApiRig) -> None:
    sid, link, _ = await park_write(api, call_id="toolu_d")
    page = await api.http.get(link)
    r = await api.http.post(link, data={"csrf": csrf_of(page.text), "decision": "deny",
                                        "approver": "Carol", "reason": "wrong file"})
    assert r.status_code == 200 and "You denied this call" in r.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_d", params={"wait": 20})
    assert done.json()["status"] == "denied"
    assert "wrong file" in done.json()["result"]["content"][0]["text"]


async def test_allow_with_edits_and_form_errors(api: ApiRig) -> None:
    sid, link, _ = await park_write(api, call_id="toolu_e")
    page = await api.http.get(link)
    token = csrf_of(page.text)
    no_name = await api.http.post(link, data={"csrf": token, "decision": "allow"})
    assert no_name.status_code == 422 and "Enter your name" in no_name.text
    bad_json = await api.http.post(link, data={"csrf": token, "decision": "allow_with_edits",
                                               "approver": "Dan", "edited_input": "{nope"})
    assert bad_json.status_code == 422 and "not valid JSON" in bad_json.text
    escape = await api.http.post(link, data={
        "csrf": token, "decision": "allow_with_edits", "approver": "Dan",
        "edited_input": '{"path": "../../etc/x", "content": "x"}'})
    assert escape.status_code == 422 and "escapes the workspace" in escape.text
    ok = await api.http.post(link, data={
        "csrf": token, "decision": "allow_with_edits", "approver": "Dan",
        "edited_input": '{"path": "edited.txt", "content": "from the page"}'})
    assert ok.status_code == 200, ok.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_e", params={"wait": 20})
    assert done.json()["status"] == "succeeded"
    assert (api.workspace / "edited.txt").read_text() == "from the page"
    # The decided page, right after the edit and opened again later, shows what
    # ran: the edited arguments, the diff of the edit, who decided when, no expiry.
    for page in (ok, await api.http.get(link)):
        text = html.unescape(page.text)
        assert "Arguments (as edited)" in text and "Changes: the edit of the arguments" in text
        args = text.split('data-testid="args">')[1].split("</pre>")[0]
        assert '"path": "edited.txt"' in args and "new.txt" not in args
        diff = text.split('aria-label="diff"')[1].split("</pre>")[0]
        assert '>+  "content": "from the page",<' in diff and '>-  "path": "new.txt"<' in diff
        assert "+world" not in text  # the preview of the original file write is gone
        assert "decided by Dan (name given on the link, not verified) at " in text
        assert "expires" not in text.lower()


async def test_csrf_and_tampering(api: ApiRig) -> None:
    sid, link, parked = await park_write(api, call_id="toolu_c")
    page = await api.http.get(link)
    token = csrf_of(page.text)
    # No token / forged token / no cookie / foreign origin: refused, state unchanged.
    assert (await api.http.post(link, data={"decision": "allow", "approver": "x"})
            ).status_code == 403
    assert (await api.http.post(link, data={"csrf": token + "x", "decision": "allow",
                                            "approver": "x"})).status_code == 403
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as stranger:
        r = await stranger.post(link, data={"csrf": token, "decision": "allow", "approver": "x"})
        assert r.status_code == 403
    r = await api.http.post(link, data={"csrf": token, "decision": "allow", "approver": "x"},
                            headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    r = await api.http.post(link, data={"csrf": token, "decision": "allow", "approver": "x"},
                            headers={"Sec-Fetch-Site": "cross-site", "Origin": "null"})
    assert r.status_code == 403
    # Tampered tokens: 403 page (HTML), never a decision.
    tampered = link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB")
    for bad in (tampered, "/approve/garbage", "/approve/" + "x" * 500):
        g = await api.http.get(bad)
        assert g.status_code == 403 and "Invalid link" in g.text
        assert g.headers["content-type"].startswith("text/html")
        p = await api.http.post(bad, data={"csrf": token, "decision": "allow", "approver": "x"})
        assert p.status_code == 403
    # Validly signed, but not the stored token of any request.
    forged = sign_token(api.rig.settings.signing_secret(), parked["request_id"], None)
    assert (await api.http.get(f"/approve/{forged}")).status_code == 403
    still = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_c")
    assert still.json()["status"] == "parked"


async def test_expired_request_is_410(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       approval_expiry_by_class={"write": 1.0}) as api:
        sid, link, parked = await park_write(api, call_id="toolu_x")
        assert parked["expires_at"] is not None
        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_x", params={"wait": 20})
        assert done.json()["status"] == "expired"
        assert done.json()["error_class"] == "confirmation_timeout"
        page = await api.http.get(link)
        assert page.status_code == 410
        assert "has expired" in page.text and "did not run" in page.text
        r = await api.http.post(link, data={"decision": "allow", "approver": "late"})
        assert r.status_code == 410
        assert not (api.workspace / "new.txt").exists()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def test_token_never_reaches_the_access_log(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str],
) -> None:
    sock = free_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, base_url=base) as api, \
            live_server(api.app, sock):
        _, link, _ = await park_write(api, call_id="toolu_log")
        token = link.removeprefix("/approve/")
        collect = _Collect()
        logging.getLogger("uvicorn.access").addHandler(collect)
        try:
            with caplog.at_level(logging.INFO):
                async with httpx.AsyncClient(base_url=base, timeout=60) as client:  # a loaded CI
                    assert (await client.get(link)).status_code == 200
                    assert (await client.get(link + "x")).status_code == 403
                await asyncio.sleep(0.1)
        finally:
            logging.getLogger("uvicorn.access").removeHandler(collect)
        assert len(collect.lines) >= 2, "no access log records"
        printed = capfd.readouterr()
        for text in ("\n".join(collect.lines), printed.out, printed.err, caplog.text):
            assert token not in text and token[:24] not in text
        assert "/approve/[redacted]" in "\n".join(collect.lines)
        assert "/approve/[redacted]" in printed.out + printed.err


async def test_control_and_bidi_characters_are_shown_not_obeyed(api: ApiRig) -> None:
    content = "red \x1b[31m text\x07 and \u202eevil\u202c\n<script>alert(1)</script>\n"
    _, link, _ = await park_write(api, path="ctl.txt", content=content, call_id="toolu_ctl")
    page = await api.http.get(link)
    assert page.status_code == 200
    for raw in ("\x1b", "\x07", "\u202e", "<script>"):
        assert raw not in page.text, repr(raw)
    assert "\\x1b[31m" in page.text and "\\u202e" in page.text
    assert "&lt;script&gt;" in page.text
