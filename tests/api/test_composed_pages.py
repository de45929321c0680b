"""Composed tools through the HTTP layer: the atomic approval page lists the
sub-tools and files, a sub-call's request is decidable from its link and from
the confirmation endpoint, and the audit timeline nests sub-calls."""

from __future__ import annotations

import html
import re
from pathlib import Path

import httpx
from temporalio.client import Client

from parkgate.approvals.links import sign_token
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import login
from tests.workflows.test_composed import PARENT_AUTO, TwoWrites, wait_request


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no csrf field"
    return html.unescape(match.group(1))


async def test_atomic_page_lists_sub_tools_and_files_and_audit_nests(api: ApiRig) -> None:
    (api.workspace / "app.py").write_text("DEBUG = True\n")
    sid = await api.register()
    await api.submit(
        sid, "atomic_edit", {"path": "app.py", "old": "True", "new": "False"}, call_id="toolu_ae"
    )
    parked = await api.wait_parked(sid, "toolu_ae")
    link = parked["approval_url"].removeprefix(api.base_url)
    page = await api.http.get(link, headers={"Authorization": ""})
    assert page.status_code == 200
    sub_tools = re.search(r'data-testid="sub-tools">([^<]*)<', page.text)
    assert sub_tools and "read_file, write_file" in sub_tools.group(1)
    files = re.search(r'data-testid="files">([^<]*)<', page.text)
    assert files and "app.py" in files.group(1)
    r = await api.http.post(link, data={"csrf": csrf_of(page.text), "decision": "allow",
                                        "approver": "Alice"})
    assert r.status_code == 200, r.text
    done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_ae", params={"wait": 20})
    assert done.json()["status"] == "succeeded", done.text
    assert (api.workspace / "app.py").read_text() == "DEBUG = False\n"

    row = await api.repo.get_call(sid, "toolu_ae")
    assert row is not None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, api.key)).status_code == 303
        detail = await browser.get(f"/audit/calls/{row.id}")
        assert detail.status_code == 200
        nested = re.findall(r'<li class="sub" data-parent="toolu_ae">', detail.text)
        assert len(nested) == 4  # read_file and write_file: called + completed each
        assert "toolu_ae.1" in detail.text and "toolu_ae.2" in detail.text


async def test_sub_call_decided_from_its_link_and_the_endpoint(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path
) -> None:
    async with api_rig(
        dev_temporal, sqlite_repo, tmp_path, policy=PARENT_AUTO, extra_tools=[TwoWrites]
    ) as api:
        sid = await api.register()
        r = await api.submit(sid, "two_writes", {"text": "hi"}, call_id="toolu_tw")
        assert r.status_code in (200, 201, 202), r.text

        # Step 1 from its approval link (re-derived: only the token hash is stored).
        first = await wait_request(api.repo, sid, "toolu_tw.1")
        approval = await api.repo.get_approval(first)
        assert approval is not None
        token = sign_token(api.rig.settings.signing_secret(), first, approval.expires_at)
        link = f"/approve/{token}"
        page = await api.http.get(link, headers={"Authorization": ""})
        assert page.status_code == 200, page.text
        parent = re.search(r'data-testid="parent">([^<]*)<', page.text)
        assert parent and "two_writes toolu_tw" in parent.group(1)
        assert "first.txt" in page.text and "Waiting for a decision" in page.text
        edits = await api.http.post(link, data={
            "csrf": csrf_of(page.text), "decision": "allow_with_edits", "approver": "Alice",
            "edited_input": '{"path": "x.txt", "content": "x"}'})
        assert edits.status_code == 422 and "not available" in edits.text
        page = await api.http.get(link, headers={"Authorization": ""})
        ok = await api.http.post(link, data={"csrf": csrf_of(page.text), "decision": "allow",
                                             "approver": "Alice"})
        assert ok.status_code == 200, ok.text
        assert "You approved this call" in ok.text

        # Step 2 from the HTTP confirmation endpoint; a second decision loses.
        second = await wait_request(api.repo, sid, "toolu_tw.2")
        url = f"/v1/sessions/{sid}/turns/t1/confirmations/{second}"
        edit = await api.http.post(url, json={"decision": "allow_with_edits",
                                              "edited_input": {"path": "y", "content": "y"}})
        assert edit.status_code == 422 and edit.json()["error"]["code"] == "invalid_decision"
        denied = await api.http.post(url, json={"decision": "deny", "reason": "no"})
        assert denied.status_code == 200, denied.text
        assert denied.json()["decision"]["decision"] == "deny"
        again = await api.http.post(url, json={"decision": "allow"})
        assert again.status_code == 409, again.text

        done = await api.http.get(f"/v1/sessions/{sid}/tool-calls/toolu_tw", params={"wait": 30})
        body = done.json()
        assert body["status"] == "succeeded", body
        assert (api.workspace / "first.txt").read_text() == "hi"
        assert not (api.workspace / "second.txt").exists()
        # The decided link now shows the decision, no form.
        view = await api.http.get(link, headers={"Authorization": ""})
        claimed = "Alice (name given on the link, not verified)"
        assert f"{claimed} approved this call via link" in view.text
        assert 'name="csrf"' not in view.text
