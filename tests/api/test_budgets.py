"""Budgets on the durable path (issue 39, part 4), with a real worker, Temporal
dev server and SQLite: a call past the limit parks for a person, who sees the
budget on the approval page and in the inbox; approved, it runs and is charged
once; `deny` budgets refuse with an error naming the budget; a call that never
runs gives its reservation back; twenty agents racing for the last five units
get five runs and fifteen parks."""

from __future__ import annotations

import asyncio
import html
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.rules.budgets import UNIT
from parkgate.store.budget_store import CHARGED, RELEASED
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_audit_pages import login as audit_login
from tests.api.test_inbox import browser_for, login

WRITES = {"writes": {"limit": 1, "tools": ["write_file"]}}


async def finished(api: ApiRig, sid: str, cid: str) -> dict[str, Any]:
    r = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 30})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def allow(api: ApiRig, sid: str, rid: str, decision: str = "allow") -> None:
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/confirmations/{rid}",
                            json={"decision": decision, "reason": "ok"})
    assert r.status_code == 200, r.text


async def used(repo: Repository, sid: str, cid: str) -> int:
    (charge,) = await repo.call_charges(sid, cid)
    return charge.used_now


async def test_park_at_the_cap_then_approve_runs_and_charges_once(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       policy={"default": {"WRITE": "auto"}}, budgets=WRITES) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "a.txt", "content": "a"}, call_id="c1")
        assert (await finished(api, sid, "c1"))["status"] == "succeeded"
        await api.submit(sid, "write_file", {"path": "b.txt", "content": "b"}, call_id="c2")
        parked = await api.wait_parked(sid, "c2")
        assert "budget:writes over its limit: 1 of 1 used, this call needs 1" in parked["rule"]
        assert not (api.workspace / "b.txt").exists()

        line = f"writes ({sid}): 1 of 1 used now (0 left); this call 1, over the limit"
        page = await api.http.get(parked["approval_url"].removeprefix(api.base_url),
                                  headers={"Authorization": ""})
        assert page.status_code == 200 and line in html.unescape(page.text)
        async with browser_for(api) as browser:
            assert (await login(browser, api.human_key)).status_code == 303
            inbox = await browser.get("/inbox")
            assert 'data-testid="budgets"' in inbox.text and line in html.unescape(inbox.text)

        await allow(api, sid, parked["request_id"])
        assert (await finished(api, sid, "c2"))["status"] == "succeeded"
        assert (api.workspace / "b.txt").read_text() == "b"
        (charge,) = await api.repo.call_charges(sid, "c2")
        assert charge.state == CHARGED and charge.used_now == 2 * UNIT  # once, past the cap
        row = await api.repo.get_call(sid, "c2")
        assert row is not None and row.rule is not None and "budget:writes" in row.rule
        # The audit: the parked event names the budget; the call's page shows its charge.
        [asked] = [e for e in await api.repo.call_events(sid, "c2")
                   if e.type == "tool.confirmation_requested"]
        assert "budget:writes over its limit" in str(asked.data["rule"])
        async with browser_for(api) as browser:
            assert (await audit_login(api, browser, api.key)).status_code == 303
            audit = await browser.get(f"/audit/calls/{row.id}")
        assert audit.status_code == 200, audit.text
        assert f"writes ({sid}): 2 of 1 used now (0 left); this call 1, charged" in \
            html.unescape(audit.text)


async def test_deny_budget_refuses_naming_it_and_a_call_that_never_ran_gives_back(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    budgets = {"writes": {"limit": 1, "tools": ["write_file"], "on_exceed": "deny"}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       policy={"default": {"WRITE": "prompt"}}, budgets=budgets) as api:
        sid = await api.register()
        # Parked by policy, holding the budget's one unit: a second call is refused.
        await api.submit(sid, "write_file", {"path": "a.txt", "content": "a"}, call_id="c1")
        parked = await api.wait_parked(sid, "c1")
        assert await used(api.repo, sid, "c1") == UNIT
        await api.submit(sid, "write_file", {"path": "b.txt", "content": "b"}, call_id="c2")
        refused = await finished(api, sid, "c2")
        assert refused["status"] == "denied" and refused["result"]["is_error"]
        text = refused["result"]["content"][0]["text"]
        assert "Budget exceeded: budget 'writes' has 0 of 1 left" in text, text
        assert refused["rule"] == "budget:writes"
        assert await api.repo.call_charges(sid, "c2") == []
        # A person denies the first: it never ran, its unit comes back.
        await allow(api, sid, parked["request_id"], "deny")
        assert (await finished(api, sid, "c1"))["status"] == "denied"
        (charge,) = await api.repo.call_charges(sid, "c1")
        assert charge.state == RELEASED and charge.used_now == 0
        await api.submit(sid, "write_file", {"path": "c.txt", "content": "c"}, call_id="c3")
        again = await api.wait_parked(sid, "c3")
        assert "budget" not in again["rule"]


async def test_twenty_agents_race_for_the_last_five_units(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    budgets = {"reads": {"limit": 5, "per": "project", "window": "1d",
                         "tools": ["list_dir"]}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, budgets=budgets) as api:
        sids = [await api.register(f"race-{i}") for i in range(20)]
        await asyncio.gather(*(api.submit(sid, "list_dir", {"path": "."}, call_id="r")
                               for sid in sids))

        async def settled(sid: str) -> str:
            for _ in range(600):
                row = await api.repo.get_call(sid, "r")
                if row is not None and row.status in ("succeeded", "parked"):
                    return str(row.status)
                await asyncio.sleep(0.05)
            raise AssertionError(f"{sid} never settled")

        statuses = await asyncio.gather(*(settled(sid) for sid in sids))
        assert statuses.count("succeeded") == 5 and statuses.count("parked") == 15
        charges = [c for sid in sids for c in await api.repo.call_charges(sid, "r")]
        assert {c.used_now for c in charges} == {5 * UNIT}  # overspent by 0


SPEND = {"spend": {"limit": 10, "tools": ["write_file"], "counts": "input.content"}}


async def test_an_approvers_edit_is_charged_instead_of_the_input_it_replaced(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """The agent asks to spend 8 of 10; the approver edits it down to 3: the
    call runs with 3 and the budget counts 3. An edit up past the limit is
    charged too (a person approved it); an edit the budget cannot count is
    refused with a 4xx naming it, and nothing changes."""
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       policy={"default": {"WRITE": "prompt"}}, budgets=SPEND) as api:
        sid = await api.register()
        await api.submit(sid, "write_file", {"path": "a.txt", "content": "8"}, call_id="c1")
        parked = await api.wait_parked(sid, "c1")
        assert await used(api.repo, sid, "c1") == 8 * UNIT
        url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
        bad = await api.http.post(url, json={"decision": "allow_with_edits", "edited_input": {
            "path": "a.txt", "content": "lots"}})
        assert bad.status_code in (400, 409, 422), bad.text
        assert "budget 'spend' counts input.content: 'lots' is not a number" in bad.text
        assert await used(api.repo, sid, "c1") == 8 * UNIT
        ok = await api.http.post(url, json={"decision": "allow_with_edits", "edited_input": {
            "path": "a.txt", "content": "3"}})
        assert ok.status_code == 200, ok.text
        assert (await finished(api, sid, "c1"))["status"] == "succeeded"
        assert (api.workspace / "a.txt").read_text() == "3"
        (charge,) = await api.repo.call_charges(sid, "c1")
        assert charge.state == CHARGED and charge.amount == 3 * UNIT
        assert charge.used_now == 3 * UNIT

        # Up past the limit: 3 used, 5 asked (fits), edited to 9: charged 9.
        await api.submit(sid, "write_file", {"path": "b.txt", "content": "5"}, call_id="c2")
        parked = await api.wait_parked(sid, "c2")
        assert await used(api.repo, sid, "c2") == 8 * UNIT
        url = f"/v1/sessions/{sid}/turns/t1/confirmations/{parked['request_id']}"
        ok = await api.http.post(url, json={"decision": "allow_with_edits", "edited_input": {
            "path": "b.txt", "content": "9"}})
        assert ok.status_code == 200, ok.text
        assert (await finished(api, sid, "c2"))["status"] == "succeeded"
        (charge,) = await api.repo.call_charges(sid, "c2")
        assert charge.state == CHARGED and charge.amount == 9 * UNIT
        assert charge.used_now == 12 * UNIT  # past the limit: a person let it
