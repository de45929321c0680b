"""Budgets held to the old paths' tests: one project's calls never spend
another project's or another key's budget, and another project's key sees
none of its charges; an input the budget cannot count (a string, a negative,
NaN, a number past what the store holds) ends the call with a message naming
the budget, never a 5xx or a stuck call, and charges nothing; every budget
decision is in the audit with a chain that verifies. Real worker, Temporal
dev server, SQLite, over the app."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.rules.budgets import UNIT
from parkgate.store.budget_store import CHARGED
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.api.test_budgets import finished


async def key_of(api: ApiRig, project: str) -> dict[str, str]:
    key, _ = await api.repo.create_api_key(f"{project}-{uuid.uuid4().hex[:6]}",
                                           project=project, roles=["agent", "auditor"])
    return {"Authorization": f"Bearer {key}"}


async def register(api: ApiRig, headers: dict[str, str], workspace: Path) -> str:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    r = await api.http.post("/v1/sessions", headers=headers,
                            json={"session_id": sid, "workspace_path": str(workspace)})
    assert r.status_code in (200, 201), r.text
    return sid


async def submit(api: ApiRig, headers: dict[str, str], sid: str, cid: str,
                 tool_input: dict[str, Any], name: str = "list_dir") -> dict[str, Any]:
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=headers,
                            params={"wait": 20},
                            json={"id": cid, "name": name, "input": tool_input})
    assert r.status_code < 500, r.text
    return dict(r.json())


async def test_a_projects_and_a_keys_budget_is_its_own(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    budgets = {"per-project": {"limit": 1, "per": "project", "tools": ["list_dir"],
                               "on_exceed": "deny"},
               "per-key": {"limit": 1, "per": "key", "tools": ["read_file"],
                           "on_exceed": "deny"}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, budgets=budgets,
                       workspace_roots=[tmp_path]) as api:
        (api.workspace / "a.txt").write_text("a")
        alpha = {"Authorization": f"Bearer {api.key}"}
        beta = await key_of(api, "beta")
        alpha2 = await key_of(api, "default")
        a_sid = await register(api, alpha, api.workspace)
        (tmp_path / "beta-ws").mkdir()
        b_sid = await register(api, beta, tmp_path / "beta-ws")
        assert (await submit(api, alpha, a_sid, "a1", {"path": "."}))["status"] == "succeeded"
        again = await submit(api, alpha, a_sid, "a2", {"path": "."})
        assert again["status"] == "denied" and again["rule"] == "budget:per-project", again
        # Beta's project has its own unit.
        assert (await submit(api, beta, b_sid, "b1", {"path": "."}))["status"] == "succeeded"
        # Per key: alpha's first key spends its unit, its second key still has one.
        assert (await submit(api, alpha, a_sid, "k1", {"path": "a.txt"},
                             "read_file"))["status"] == "succeeded"
        assert (await submit(api, alpha, a_sid, "k2", {"path": "a.txt"},
                             "read_file"))["status"] == "denied"
        assert (await submit(api, alpha2, a_sid, "k3", {"path": "a.txt"},
                             "read_file"))["status"] == "succeeded"
        # Beta reads none of alpha's calls or their charges.
        for path in (f"/v1/sessions/{a_sid}/tool-calls/a1",
                     f"/v1/sessions/{a_sid}/tool-calls/a2/events"):
            r = await api.http.get(path, headers=beta)
            assert r.status_code == 404, (path, r.text)
        listed = await api.http.get("/v1/tool-calls", params={"session_id": a_sid},
                                    headers=beta)
        assert listed.status_code == 200 and listed.json()["items"] == [], listed.text
        (b_charge,) = await api.repo.call_charges(b_sid, "b1")
        assert b_charge.scope == "beta" and b_charge.used_now == UNIT


async def test_inputs_the_budget_cannot_count_end_the_call_and_charge_nothing(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    budgets = {"bytes": {"limit": 10**9, "tools": ["write_file"], "counts": "input.content"}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, budgets=budgets,
                       policy={"default": {"WRITE": "auto"}}) as api:
        sid = await api.register()
        alpha = {"Authorization": f"Bearer {api.key}"}
        contents = ["abc", "", "-1", "-0.5", "NaN", "sNaN", "Infinity", "-Infinity",
                    "1e999999", "1e-999999", "1e400", "1e20", "9" * 40, "1" * 5000, "1_000",
                    " 5 ", "\u0665", "0x10", "1e999999999", "\x00"]
        for i, content in enumerate(contents):
            out = await submit(api, alpha, sid, f"c{i}", {"path": f"f{i}.txt",
                                                          "content": content}, "write_file")
            if "error" in out:  # refused at the door: a 4xx naming the problem
                assert out["error"]["message"], (content, out)
                continue
            done = out if out.get("finished") else await finished(api, sid, f"c{i}")
            assert done["status"] in ("denied", "failed", "succeeded"), (content, done)
            if done["status"] != "succeeded":
                text = done["result"]["content"][0]["text"]
                assert "budget 'bytes'" in text, (content, text)
                assert await api.repo.call_charges(sid, f"c{i}") == [], content
        # A countable input still counts, exactly, and the chain verifies.
        ok = await submit(api, alpha, sid, "fine", {"path": "ok.txt", "content": "2.5"},
                          "write_file")
        assert ok["status"] == "succeeded", ok
        (charge,) = await api.repo.call_charges(sid, "fine")
        assert charge.amount == 2 * UNIT + UNIT // 2 and charge.state == CHARGED, charge
        report = await api.repo.verify_chain(sid)
        assert report.ok and report.problems == [], report


async def test_budget_decisions_are_in_the_audit(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    """A call past a deny budget and one past a park budget: each call's events
    name the budget rule, the audit API lists them under it, the chain verifies."""
    budgets = {"lists": {"limit": 1, "tools": ["list_dir"], "on_exceed": "deny"},
               "reads": {"limit": 1, "tools": ["read_file"]}}
    async with api_rig(dev_temporal, sqlite_repo, tmp_path, budgets=budgets) as api:
        (api.workspace / "a.txt").write_text("a")
        sid = await api.register()
        alpha = {"Authorization": f"Bearer {api.key}"}
        for cid, name, tool_input in (("l1", "list_dir", {"path": "."}),
                                      ("l2", "list_dir", {"path": "."}),
                                      ("r1", "read_file", {"path": "a.txt"})):
            await submit(api, alpha, sid, cid, tool_input, name)
        await submit(api, alpha, sid, "r2", {"path": "a.txt"}, "read_file")
        parked = await api.wait_parked(sid, "r2")
        assert "budget:reads" in parked["rule"]
        events = {cid: await api.repo.call_events(sid, cid) for cid in ("l2", "r2")}
        denied = [e for e in events["l2"] if e.type in ("tool.failed", "tool.input_invalid")]
        assert len(denied) == 1 and "budget:lists" in str(denied[0].data), events["l2"]
        asked = [e for e in events["r2"] if e.type == "tool.confirmation_requested"]
        assert len(asked) == 1 and "budget:reads" in str(asked[0].data), events["r2"]
        audit = await api.http.get("/v1/tool-calls", params={"session_id": sid})
        rows = {c["tool_use_id"]: c for c in audit.json()["items"]}
        assert rows["l2"]["status"] == "denied" and rows["r2"]["status"] == "parked", rows
        report = await api.repo.verify_chain(sid)
        assert report.ok and report.problems == [], report
