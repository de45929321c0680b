"""Issue 36 (3): nothing an agent declares loosens the operator's classification.

An agent key's `client_tools` may not class a tool more loosely than the
deployment does (`claude_code_tools`, Claude Code's built-in table): POST
/v1/sessions refuses it with a 422 naming the tool, and a declaration stored
anyway (before an upgrade or a settings change) is tightened at each submit."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.claude_code.test_hook_endpoint import decision, event


def declaration(name: str, side_effects: str) -> dict[str, str]:
    return {"name": name, "side_effects": side_effects}


async def register(api: ApiRig, *tools: dict[str, str]) -> tuple[int, dict[str, object], str]:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    r = await api.http.post("/v1/sessions", json={
        "session_id": sid, "workspace_path": str(api.workspace), "client_tools": list(tools)})
    return r.status_code, r.json(), sid


async def stored_loosely(api: ApiRig, sid: str, name: str, side_effects: str) -> None:
    """A declaration the API no longer accepts, as an older parkgate stored it."""
    key = await api.repo.verify_api_key(api.key)
    assert key is not None
    await api.repo.register_session(
        sid, str(api.workspace), "main", project=key.project, registered_by=key.id,
        client_tools=[declaration(name, side_effects)])


async def test_a_looser_declaration_is_refused_naming_the_tool(
        dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with api_rig(dev_temporal, pg_repo, tmp_path,
                       claude_code_tools={"deploy_*": "execute", "Bash": "execute"}) as api:
        status, body, _ = await register(api, declaration("Bash", "none"))
        assert status == 422, body
        assert body["error"]["code"] == "client_tool_too_loose"
        assert "'Bash' is classed execute" in body["error"]["message"]
        status, body, _ = await register(api, declaration("notes", "none"),
                                         declaration("deploy_prod", "read"))
        assert status == 422 and "'deploy_prod'" in body["error"]["message"], body
        # Claude Code's built-in table counts without any setting: Write writes.
        status, body, _ = await register(api, declaration("Write", "network"))
        assert status == 422 and "built-in" in body["error"]["message"], body
        # As strict or stricter, and tools the deployment says nothing of: accepted.
        status, body, _ = await register(api, declaration("Bash", "execute"),
                                         declaration("Read", "write"),
                                         declaration("notes", "none"))
        assert status == 201, body


async def test_the_hook_takes_the_stricter_class_over_a_stored_declaration(
        dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    """The attack: Bash declared `none` by the agent; the hook still parks
    `rm -rf` (and, not decided within the wait, denies it)."""
    async with api_rig(dev_temporal, pg_repo, tmp_path, claude_code_wait_seconds=0.5,
                       claude_code_tools={"Bash": "execute"}) as api:
        ev = event(api, tool_name="Bash", tool_input={"command": "rm -rf ./build"})
        await stored_loosely(api, ev["session_id"], "Bash", "none")
        r = await api.http.post("/v1/hooks/claude-code", json=ev)
        verdict, reason = decision(r.json())
        assert verdict == "deny" and "waiting for a human approval" in reason, reason
        r = await api.http.get(f"/v1/sessions/{ev['session_id']}/tool-calls/{ev['tool_use_id']}")
        assert r.json()["status"] == "parked", r.json()
        session = await api.repo.get_session(ev["session_id"])
        assert session is not None
        assert [t["side_effects"] for t in session.client_tools or []] == ["execute"]


async def test_a_submit_takes_the_stricter_class_over_a_stored_declaration(
        dev_temporal: Client, pg_repo: Repository, tmp_path: Path) -> None:
    async with api_rig(dev_temporal, pg_repo, tmp_path) as api:
        sid = f"s-{uuid.uuid4().hex[:10]}"
        await stored_loosely(api, sid, "Write", "none")
        r = await api.http.post(f"/v1/sessions/{sid}/turns/t1/tool-calls?wait=10", json={
            "type": "tool_use", "id": "toolu_w1", "name": "Write",
            "input": {"file_path": str(api.workspace / "x"), "content": "x"}})
        assert r.status_code in (200, 202), r.text
        assert r.json()["status"] == "parked", r.json()
        tools = (await api.http.get(f"/v1/sessions/{sid}/tools")).json()["tools"]
        assert [t["side_effects"] for t in tools if t["name"] == "Write"] == ["write"]
