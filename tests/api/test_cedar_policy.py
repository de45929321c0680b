"""Cedar policies on the durable path (issue 39): the classify activity reads who
submitted the call and its session's project from the store, so a policy on
the principal decides, and the audit and the approval name `cedar:<id>`; `parkgate policy explain`
classifies the recorded call again with today's policies.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from typer.testing import CliRunner

from parkgate.cli import app
from parkgate.settings import get_settings
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig

POLICY = """
// Writes in payments need two on-call approvers.
@id("payments-writes")
@approvers("group:oncall")
@quorum("2")
permit(principal in Parkgate::Project::"payments", action == Parkgate::Action::"call",
       resource)
when { resource.side_effects == "write" };

@id("no-writes-for-interns")
forbid(principal == Parkgate::Agent::"intern", action, resource)
when { resource.side_effects == "write" };
"""


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(api: ApiRig, key: str, workspace: Path, sid: str, path: str) -> None:
    r = await api.http.post("/v1/sessions", headers=bearer(key), json={
        "session_id": sid, "workspace_path": str(workspace)})
    assert r.status_code in (200, 201), r.text
    r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls", headers=bearer(key),
                            json={"id": "toolu_1", "name": "write_file",
                                  "input": {"path": path, "content": "x\n"}})
    assert r.status_code in (200, 202), r.text  # a denial answers at once


async def settled(api: ApiRig, sid: str) -> Any:
    """The call's row once it is parked or finished."""
    for _ in range(600):
        row = await api.repo.get_call(sid, "toolu_1")
        if row is not None and (row.request_id or row.status in ("succeeded", "failed", "denied")):
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"{sid} never settled")


async def test_cedar_decides_by_principal_and_project_on_the_durable_path(
    dev_temporal: Client, sqlite_repo: Repository, sqlite_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = tmp_path / "policy.cedar"
    policy.write_text(POLICY)
    async with api_rig(
        dev_temporal, sqlite_repo, tmp_path, workspace_roots=[tmp_path],
        policy={"default": {"WRITE": "auto"}}, policy_files=[policy],
        approvers={"alice": {}, "bob": {"projects": ["payments"]},
                   "carol": {"projects": ["payments"]}},
        approver_groups={"oncall": ["bob", "carol"]},
    ) as api:
        repo = api.repo
        intern, _ = await repo.create_api_key("intern", roles=["agent", "auditor"])
        payer, _ = await repo.create_api_key("payer", project="payments",
                                             roles=["agent", "auditor"])
        pay_ws = tmp_path / "payments-ws"
        pay_ws.mkdir()

        # The default project's agent: no permit matches, the YAML policy runs it.
        await submit(api, api.key, api.workspace, "s-default", "a.txt")
        row = await settled(api, "s-default")
        assert row.status == "succeeded" and row.rule == "default.WRITE=auto", row
        assert (api.workspace / "a.txt").exists()

        # The intern: the forbid refuses, and says which policy did.
        await submit(api, intern, api.workspace, "s-intern", "b.txt")
        row = await settled(api, "s-intern")
        assert row.status == "denied" and row.rule == "cedar:no-writes-for-interns", row
        [event] = [e for e in await repo.call_events("s-intern", "toolu_1")
                   if e.type == "tool.failed"]
        assert "Cedar policy cedar:no-writes-for-interns refuses" in str(event.message)
        assert not (api.workspace / "b.txt").exists()

        # Payments: parked for two on-call approvers, the approval naming the policy.
        await submit(api, payer, pay_ws, "s-pay", "c.txt")
        row = await settled(api, "s-pay")
        assert row.status == "parked" and row.rule == "cedar:payments-writes", row
        approval = await repo.get_approval(row.request_id)
        assert approval is not None
        assert approval.info["rule"] == "cedar:payments-writes"
        assert (approval.info["approvers"], approval.info["quorum"]) == (["bob", "carol"], 2)
        assert not (pay_ws / "c.txt").exists()

        # `parkgate policy explain`: the intern's call against today's policies.
        policy.write_text(POLICY.split('@id("no-writes-for-interns")')[0])
        config = tmp_path / "server.yaml"
        config.write_text(
            f"database_url: {sqlite_url}\ndata_dir: {tmp_path / 'data'}\n"
            f"workspace_roots: [{tmp_path}]\npolicy_files: [{policy}]\n"
            "tool_confirmation: {default: {WRITE: auto}}\n"
            "approvers: {alice: {}, bob: {}, carol: {}}\n"
            "approver_groups: {oncall: [bob, carol]}\n")
        for key in [k for k in os.environ if k.startswith("PARKGATE_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("COLUMNS", "200")
        # `--config` sets PARKGATE_CONFIG in os.environ: registered here, monkeypatch
        # removes it after the test (later tests must not read this file).
        monkeypatch.setenv("PARKGATE_CONFIG", "")
        get_settings.cache_clear()
        try:
            result = await asyncio.to_thread(
                CliRunner().invoke, app, ["--config", str(config), "policy", "explain",
                                          "s-intern", "toolu_1"])
        finally:
            get_settings.cache_clear()
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert any("then" in line and "deny, rule cedar:no-writes-for-interns" in line
                   for line in lines), result.stdout
        assert any("now" in line and "auto, rule default.WRITE=auto" in line
                   for line in lines), result.stdout
