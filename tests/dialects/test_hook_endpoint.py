"""/v1/hooks/{codex,gemini} over ASGI with a real worker, Temporal and Postgres:
allowed at once, parked then picked up by the same call again, outcomes filed,
hostile input refused with a 4xx that says why."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from parkgate.calls.records import CallStatus
from parkgate.store.results import CallFilters
from tests.api.rig import ApiRig


def codex(api: ApiRig, sid: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": sid, "cwd": str(api.workspace),
            "tool_name": "Bash", "tool_input": {"command": "ls"},
            "tool_use_id": f"call_{uuid.uuid4().hex[:10]}", "turn_id": "turn-1",
            "model": "m", "permission_mode": "default", "transcript_path": None, **fields}


def gemini(api: ApiRig, sid: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "BeforeTool", "session_id": sid, "cwd": str(api.workspace),
            "tool_name": "write_file",
            "tool_input": {"file_path": "out.txt", "content": "hi\n"},
            "transcript_path": "", "timestamp": "2026-01-01T00:00:00Z", **fields}


async def post(api: ApiRig, agent: str, body: Any) -> httpx.Response:
    return await api.http.post(f"/v1/hooks/{agent}", json=body)


async def approve(api: ApiRig, sid: str, turn: str) -> str:
    """Allow the session's one parked call from the inbox's API; its id."""
    calls = await api.repo.list_calls(CallFilters(session_id=sid, status=CallStatus.PARKED),
                                      limit=5)
    assert len(calls.items) == 1, calls.items
    cid = calls.items[0].tool_use_id
    parked = await api.wait_parked(sid, cid)
    r = await api.http.post(f"/v1/sessions/{sid}/turns/{turn}/confirmations/"
                            f"{parked['request_id']}", json={"decision": "allow"})
    assert r.status_code == 200, r.text
    return cid


async def test_codex_an_allowed_read_runs_and_its_outcome_is_filed(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    (api_pg.workspace / "a.txt").write_text("x")
    body = codex(api_pg, sid, tool_name="read_file",
                 tool_input={"file_path": str(api_pg.workspace / "a.txt")})
    r = await post(api_pg, "codex", body)
    assert r.status_code == 200 and r.json() == {}, r.text  # no decision: Codex runs it
    done = await post(api_pg, "codex", {**body, "hook_event_name": "PostToolUse",
                                        "tool_response": "x"})
    assert done.status_code == 200 and done.json() == {}
    call = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{body['tool_use_id']}",
                                 params={"wait": 10})
    assert call.json()["status"] == "succeeded", call.json()
    session = await api_pg.repo.get_session(sid)
    assert session is not None and session.client_tools is not None
    assert session.client_tools[0]["side_effects"] == "read"


async def test_codex_a_shell_call_parks_then_the_same_call_runs(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    body = codex(api_pg, sid, tool_input={"command": "touch made.txt"})
    r = await post(api_pg, "codex", body)
    out = r.json()["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny", out
    reason = out["permissionDecisionReason"]
    assert "waiting for a human approval" in reason and "/inbox" in reason
    assert "/approve/" not in reason and "token" not in reason  # never the signed link
    await approve(api_pg, sid, "turn-1")
    again = await post(api_pg, "codex", body)
    assert again.json() == {}, again.text
    twice = await post(api_pg, "codex", body)  # it runs once
    assert "already claimed" in str(twice.json())


async def test_codex_denied_call_says_why(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    body = codex(api_pg, sid, tool_input={"command": "rm -rf build"})
    await post(api_pg, "codex", body)
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=5)
    parked = await api_pg.wait_parked(sid, calls.items[0].tool_use_id)
    r = await api_pg.http.post(f"/v1/sessions/{sid}/turns/turn-1/confirmations/"
                               f"{parked['request_id']}",
                               json={"decision": "deny", "reason": "not on friday"})
    assert r.status_code == 200, r.text
    again = (await post(api_pg, "codex", body)).json()["hookSpecificOutput"]
    assert again["permissionDecision"] == "deny"
    assert "not on friday" in again["permissionDecisionReason"]


async def test_gemini_no_call_id_retry_attaches_and_after_tool_files(api_pg: ApiRig) -> None:
    sid = f"gm-{uuid.uuid4().hex[:8]}"
    body = gemini(api_pg, sid)
    first = (await post(api_pg, "gemini", body)).json()
    assert first["decision"] == "deny" and "call the tool again" in first["reason"].lower()
    cid = await approve(api_pg, sid, "gemini")
    again = (await post(api_pg, "gemini", body)).json()
    assert again["decision"] == "allow", again
    after = await post(api_pg, "gemini", {**body, "hook_event_name": "AfterTool",
                                          "tool_response": {"llmContent": "wrote out.txt"}})
    assert after.status_code == 200
    call = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 10})
    assert call.json()["status"] == "succeeded", call.json()
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=5)
    assert [c.tool_use_id for c in calls.items] == [cid]  # the retry parked nothing new


async def test_gemini_two_hooks_for_one_parked_call_run_it_once(api_pg: ApiRig) -> None:
    sid = f"gm-{uuid.uuid4().hex[:8]}"
    body = gemini(api_pg, sid, tool_name="run_shell_command",
                  tool_input={"command": "make deploy"})
    await post(api_pg, "gemini", body)
    await approve(api_pg, sid, "gemini")
    answers = await asyncio.gather(post(api_pg, "gemini", body), post(api_pg, "gemini", body))
    decisions = sorted(a.json()["decision"] for a in answers)
    assert decisions == ["allow", "deny"], [a.json() for a in answers]
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=5)
    assert len(calls.items) == 1


async def test_hostile_input_is_a_4xx_with_a_message(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    cases: list[tuple[str, Any, int, str]] = [
        ("codex", [1, 2], 422, "JSON object"),
        ("codex", codex(api_pg, sid, tool_use_id="../x y"), 422, "tool_use_id"),
        ("codex", codex(api_pg, sid, tool_input="rm"), 422, "tool_input"),
        ("codex", {"hook_event_name": "PreToolUse"}, 422, "session_id"),
        ("gemini", {"hook_event_name": "Evil", "session_id": "s"}, 422, "not a Gemini"),
        ("nobody", codex(api_pg, sid), 404, "codex"),
    ]
    for agent, body, status, says in cases:
        r = await post(api_pg, agent, body)
        assert r.status_code == status, (agent, body, r.text)
        assert says in r.json()["error"]["message"], r.text
    raw = await api_pg.http.post("/v1/hooks/codex", content=b"{not json",
                                 headers={"Content-Type": "application/json"})
    assert raw.status_code == 400 and "not JSON" in raw.json()["error"]["message"]


async def test_codex_a_path_of_parkgates_own_is_denied(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    secret = api_pg.rig.settings.data_dir / "link-secret"
    r = await post(api_pg, "codex", codex(api_pg, sid, tool_input={"command": f"cat {secret}"}))
    out = r.json()["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny" and "may not reach" in out[
        "permissionDecisionReason"], out


async def test_codex_two_hooks_for_one_parked_call_run_it_once(api_pg: ApiRig) -> None:
    sid = f"cx-{uuid.uuid4().hex[:8]}"
    body = codex(api_pg, sid, tool_input={"command": "make deploy"})
    await post(api_pg, "codex", body)
    await approve(api_pg, sid, "turn-1")
    answers = await asyncio.gather(post(api_pg, "codex", body), post(api_pg, "codex", body))
    allowed = [a.json() for a in answers if a.json() == {}]
    denied = [a.json() for a in answers if a.json() != {}]
    assert len(allowed) == 1 and "claimed" in str(denied), [a.json() for a in answers]
