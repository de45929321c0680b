"""MCP and client tools: a model retrying without a tool_use_id attaches to its
parked call (same tool, same input), and an approved client tool's call comes
back `released` with the input to run (parkgate never runs it)."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from parkgate.models import input_sha256
from parkgate.store.repository import Repository
from parkgate.store.results import CallFilters
from tests.api.test_mcp_gateway import WAIT, mcp_session, served, text_of
from tests.client_tools.test_client_calls import DEPLOY


async def test_retry_attaches_and_a_client_tool_is_released(
    dev_temporal: Client, pg_repo: Repository, tmp_path: Path
) -> None:
    async with served(dev_temporal, pg_repo, tmp_path, **WAIT) as (api, base):
        sid = f"s-{uuid.uuid4().hex[:8]}"
        r = await api.http.post("/v1/sessions", json={
            "session_id": sid, "workspace_path": str(api.workspace), "client_tools": [DEPLOY]})
        assert r.status_code == 201, r.text
        async with mcp_session(base, sid, api.key) as mcp:
            first = await mcp.call_tool("deploy", {"service": "m"})
            first_id = (first.meta or {})["tool_use_id"]
            assert (first.meta or {})["parkgate/status"] == "parked"
            retry = await mcp.call_tool("deploy", {"service": "m"})  # a fresh id: attaches
            assert (retry.meta or {})["tool_use_id"] == first_id
            parked = await api.wait_parked(sid, first_id)
            decided = await api.http.post(
                f"/v1/sessions/{sid}/turns/mcp/confirmations/{parked['request_id']}",
                json={"decision": "allow"})
            assert decided.status_code == 200, decided.text
            again = await mcp.call_tool("deploy", {"service": "m"}, meta={"tool_use_id": first_id})
            meta = again.meta or {}
            assert meta["parkgate/status"] == "released", text_of(again)
            assert meta["parkgate/input_sha256"] == input_sha256({"service": "m"})
            assert "has not run it" in text_of(again)
        calls = await api.repo.list_calls(CallFilters(session_id=sid), limit=10)
        assert [c.tool_use_id for c in calls.items] == [first_id]  # the retry parked nothing
        page = await api.http.get(f"/v1/sessions/{sid}/tool-calls/{first_id}")
        assert page.json()["status"] == "released"
