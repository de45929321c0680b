"""Approval links under attack: tampered, forged, spliced, expired and replayed
tokens; CSRF tokens moved between requests; GETs that must never decide; and
`<script>` in tool arguments rendered inert on the approval and audit pages."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from parkgate.approvals.links import sign_token
from tests.faults.harness.apiclient import TERMINAL
from tests.faults.harness.stack import Stack
from tests.hostile.conftest import WRITE_EXPIRY_SECONDS
from tests.hostile.helpers import Hostile, assert_error_shape, assert_inert, csrf_of, path_of

pytestmark = [pytest.mark.devserver, pytest.mark.timeout(180)]

SID = "hl-park"
XSS = [
    "<script>alert('pwned')</script>",
    '"><img src=x onerror=alert(1)>',
    "</pre><script>alert(2)</script>",
    "javascript:alert(3)//",
]


@pytest.fixture
async def h(hostile_stack: Stack) -> AsyncIterator[Hostile]:
    async with Hostile(hostile_stack) as client:
        await client.register(SID, str(hostile_stack.untrusted))
        yield client
        assert not client.server_errors, (
            f"{client.server_errors}\n{hostile_stack.logs(60)}"
        )


async def park(h: Hostile, tuid: str, block: dict | None = None) -> dict:
    block = block or {"id": tuid, "name": "shell",
                      "input": {"command": f"echo run >> markers/{tuid}"}}
    await h.submit(SID, block)
    call = await h.until(SID, tuid, {"parked"})
    assert call["status"] == "parked", call
    # A call may show `parked` a moment before its approval request is stored
    # (pinned by tests/faults/test_parked_is_decidable.py); links need the URL.
    for _ in range(100):
        if call.get("approval_url") or call["status"] != "parked":
            break
        await asyncio.sleep(0.1)
        call = await h.call(SID, tuid)
    assert call.get("approval_url"), call
    return call


def runs(stack: Stack, tuid: str) -> int:
    marker = stack.untrusted / "markers" / tuid
    return len(marker.read_text().splitlines()) if marker.exists() else 0


async def page(h: Hostile, url: str) -> tuple[int, str]:
    r = await h.anon.get(path_of(url))
    h.note(r, bad=False)
    return r.status_code, r.text


async def post_form(h: Hostile, url: str, data: dict[str, str], *, bad: bool = True) -> int:
    r = await h.anon.post(path_of(url), data=data, follow_redirects=True)
    h.note(r, bad=bad)
    return r.status_code


async def test_get_never_decides_and_a_valid_post_runs_once(h: Hostile,
                                                            hostile_stack: Stack) -> None:
    call = await park(h, "tu_link_ok")
    url = call["approval_url"]
    for _ in range(3):  # link unfurlers, mail scanners, a curious human
        status, text = await page(h, url)
        assert status == 200, text[:300]
        await h.anon.head(path_of(url))
    await asyncio.sleep(0.5)
    assert (await h.call(SID, "tu_link_ok"))["status"] == "parked"

    status, text = await page(h, url)
    csrf = csrf_of(text)
    assert csrf, "approval page has no CSRF field"
    form = {"csrf": csrf, "decision": "allow", "approver": "alice", "reason": ""}
    assert await post_form(h, url, form, bad=False) == 200
    final = await h.until(SID, "tu_link_ok", TERMINAL)
    assert final["status"] == "succeeded", final

    # Replays: the same form again, a deny after the allow, a fresh form: no effect.
    code = await post_form(h, url, form)
    assert code < 500
    _, text = await page(h, url)
    code = await post_form(h, url, {**form, "csrf": csrf_of(text) or csrf, "decision": "deny",
                                    "approver": "mallory"})
    assert code < 500
    _, text = await page(h, url)
    assert "alice" in text and "mallory" not in text, "the page must show the first decider"
    await asyncio.sleep(0.5)
    assert runs(hostile_stack, "tu_link_ok") == 1
    assert (await h.call(SID, "tu_link_ok"))["status"] == "succeeded"

    # Neither the link token nor the API key ever reaches a log.
    token = url.rsplit("/approve/", 1)[1]
    for proc in [*hostile_stack.workers, hostile_stack.api]:
        assert proc is not None
        text = proc.log_path.read_text(errors="replace")
        assert token not in text, f"approval token written to the {proc.name} log"
        assert (hostile_stack.api_key or "-") not in text, f"API key in the {proc.name} log"


async def test_tampered_forged_and_spliced_tokens(h: Hostile, hostile_stack: Stack) -> None:
    a = await park(h, "tu_link_a")
    b = await park(h, "tu_link_b")
    ta = a["approval_url"].rsplit("/approve/", 1)[1]
    tb = b["approval_url"].rsplit("/approve/", 1)[1]
    base = a["approval_url"].rsplit("/approve/", 1)[0]
    pa, _, sa = ta.rpartition(".")
    pb, _, sb = tb.rpartition(".")
    flip = "A" if sa[-2] != "A" else "B"
    forged = sign_token("not-the-server-secret-" + "x" * 30, "whatever", None)
    bad_tokens = [
        sa and f"{pa}.{sa[:-2]}{flip}{sa[-1]}",  # one character of the signature
        f"{pa}.{sb}",                             # A's payload, B's signature
        f"{pb}.{sa}",
        f"{pa[:-1]}.{sa}",                        # payload cut short
        forged,                                   # signed with another secret
        "x",
        "a" * 5000,
        "%00%ff",
        "..%2f..%2fetc%2fpasswd",
        "<script>alert(1)<%2fscript>",
    ]
    for token in bad_tokens:
        r = await h.bad("GET", f"/approve/{token}", anon=True)
        assert r.status_code in (403, 404), f"{token[:40]}: {r.status_code} {r.text[:200]}"
        assert_inert(r.text, "<script>alert(1)")
        r = await h.bad("POST", f"/approve/{token}", anon=True,
                        data={"decision": "allow", "approver": "mallory", "csrf": "x"})
        assert r.status_code in (403, 404), f"{token[:40]}: {r.status_code} {r.text[:200]}"

    # A CSRF token (and cookie) issued for B's page does not decide A.
    _, text_b = await page(h, f"{base}/approve/{tb}")
    csrf_b = csrf_of(text_b)
    assert csrf_b
    r = await h.bad("POST", f"/approve/{ta}", anon=True,
                    data={"decision": "allow", "approver": "mallory", "csrf": csrf_b})
    assert r.status_code in (400, 403), r.text[:200]
    # No CSRF at all, or a foreign Origin, is refused too.
    _, text_a = await page(h, a["approval_url"])
    r = await h.bad("POST", f"/approve/{ta}", anon=True,
                    data={"decision": "allow", "approver": "mallory"})
    assert r.status_code in (400, 403), r.text[:200]
    r = await h.bad("POST", f"/approve/{ta}", anon=True,
                    headers={"Origin": "https://evil.example"},
                    data={"decision": "allow", "approver": "mallory",
                          "csrf": csrf_of(text_a) or ""})
    assert r.status_code in (400, 403), r.text[:200]
    # Invalid decisions on a valid form.
    for decision in ("", "maybe", "allow\x00", "allow_with_edits"):
        _, text_a = await page(h, a["approval_url"])
        data = {"decision": decision, "approver": "mallory", "csrf": csrf_of(text_a) or ""}
        if decision == "allow_with_edits":
            data["edited_input"] = '{"command": ' + "[" * 5000 + "]" * 5000 + "}"
        code = await post_form(h, a["approval_url"], data)
        assert 200 <= code < 500

    # The API confirmation endpoint: B's request id under A's session, unknown ids.
    rid_b = b.get("request_id") or ""
    if rid_b:
        r = await h.bad("POST", f"/v1/sessions/nobody/turns/t1/confirmations/{rid_b}",
                        json={"decision": "allow", "reason": ""})
        assert_error_shape(r, 403, 404, 409)
    r = await h.bad("POST", f"/v1/sessions/{SID}/turns/t1/confirmations/req_does_not_exist",
                    json={"decision": "allow", "reason": ""})
    assert_error_shape(r, 404)
    r = await h.bad("POST", f"/v1/sessions/{SID}/turns/t1/confirmations/{rid_b or 'x'}",
                    json={"decision": "obviously", "reason": ""})
    assert_error_shape(r, 400, 404, 422)

    await asyncio.sleep(0.5)
    for tuid in ("tu_link_a", "tu_link_b"):
        assert (await h.call(SID, tuid))["status"] == "parked", f"{tuid} was decided"
        assert runs(hostile_stack, tuid) == 0


async def test_expired_link(h: Hostile, hostile_stack: Stack) -> None:
    """A WRITE approval expires after a few seconds here: its link then answers
    410 and nothing is written."""
    block = {"id": "tu_link_exp", "name": "write_file",
             "input": {"path": "expired.txt", "content": "should never exist\n"}}
    call = await park(h, "tu_link_exp", block)
    _, text = await page(h, call["approval_url"])
    csrf = csrf_of(text) or ""
    final = await h.until(SID, "tu_link_exp", TERMINAL, timeout=WRITE_EXPIRY_SECONDS + 60)
    assert final["status"] == "expired", final
    status, text = await page(h, call["approval_url"])
    # 410 Gone, or the page in its final "expired" state — with no form to decide.
    assert status in (200, 410), f"{status}: {text[:300]}"
    assert csrf_of(text) is None, "an expired request still offers a decide form"
    assert "expired" in text.lower(), text[:500]
    code = await post_form(h, call["approval_url"],
                           {"csrf": csrf, "decision": "allow", "approver": "late"})
    assert code in (200, 400, 403, 409, 410), code  # refused or shown as expired
    await asyncio.sleep(0.5)
    assert not (hostile_stack.untrusted / "expired.txt").exists()
    assert (await h.call(SID, "tu_link_exp"))["status"] == "expired"


async def test_script_in_arguments_is_inert_on_approval_and_audit_pages(
    h: Hostile, hostile_stack: Stack
) -> None:
    shell = await park(h, "tu_xss_shell", {
        "id": "tu_xss_shell", "name": "shell",
        "input": {"command": "echo " + " ".join(repr(x) for x in XSS)},
    })
    write = await park(h, "tu_xss_write", {
        "id": "tu_xss_write", "name": "write_file",
        "input": {"path": "x<script>alert(1)</script>.html", "content": "\n".join(XSS)},
    })
    for call in (shell, write):
        status, text = await page(h, call["approval_url"])
        assert status == 200, text[:300]
        assert_inert(text, *XSS)
        assert "&lt;script&gt;" in text or "&lt;script" in text, "arguments not shown escaped"

    # Audit pages: sign in with an API key, then list and timeline.
    status, text = await page(h, f"{hostile_stack.base_url}/audit/login")
    if status == 200 and csrf_of(text):
        r = await h.anon.post("/audit/login", data={"csrf": csrf_of(text) or "", "next": "/audit",
                                                    "api_key": hostile_stack.api_key or ""},
                              follow_redirects=True)
        h.note(r, bad=False)
        assert r.status_code == 200, r.text[:300]
    r = await h.anon.get("/audit", params={"session": SID})
    h.note(r, bad=False)
    assert r.status_code == 200, r.text[:300]
    assert_inert(r.text, *XSS)
    links = sorted(set(re.findall(r'href="(/audit/calls/[^"]+)"', r.text)))
    assert links, "audit list shows no calls"
    for link in links[:20]:
        r = await h.anon.get(link.replace("&amp;", "&"))
        h.note(r, bad=False)
        assert r.status_code == 200, r.text[:300]
        assert_inert(r.text, *XSS)
    # Reflected input in error pages and filters stays inert too.
    for params in ({"session": XSS[0]}, {"tool": XSS[1]}, {"status": XSS[2]},
                   {"approver": XSS[0]}):
        r = await h.anon.get("/audit", params=params)
        h.note(r, bad=True)
        assert r.status_code < 500
        assert_inert(r.text, *XSS)
