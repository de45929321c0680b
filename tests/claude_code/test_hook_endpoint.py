"""/v1/hooks/claude-code without the CLI: refusals and what they say."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import httpx

from parkgate.models import utcnow
from tests.api.rig import ApiRig


def event(api: ApiRig, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": str(uuid.uuid4()),
            "cwd": str(api.workspace), "tool_name": "Read",
            "tool_input": {"file_path": str(api.workspace / "a.txt")},
            "tool_use_id": f"toolu_{uuid.uuid4().hex[:12]}", **fields}


def decision(body: dict[str, Any]) -> tuple[str, str]:
    out = body["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse"
    return out["permissionDecision"], out.get("permissionDecisionReason", "")


async def test_cwd_outside_workspace_roots_is_denied_with_why(api_pg: ApiRig) -> None:
    r = await api_pg.http.post("/v1/hooks/claude-code", json=event(api_pg, cwd="/"))
    assert r.status_code == 200, r.text
    verdict, reason = decision(r.json())
    assert verdict == "deny" and "workspace_roots" in reason


async def test_an_approver_key_cannot_post_hook_events(api_pg: ApiRig) -> None:
    r = await api_pg.http.post("/v1/hooks/claude-code", json=event(api_pg),
                               headers={"Authorization": f"Bearer {api_pg.human_key}"})
    assert r.status_code == 403, r.text


async def test_same_hook_again_does_not_release_twice(api_pg: ApiRig) -> None:
    body = event(api_pg)
    first = await api_pg.http.post("/v1/hooks/claude-code", json=body)
    assert decision(first.json())[0] == "allow"
    again = await api_pg.http.post("/v1/hooks/claude-code", json=body)
    verdict, reason = decision(again.json())
    assert verdict == "deny" and "already" in reason


async def test_other_events_get_an_empty_answer(api_pg: ApiRig) -> None:
    r = await api_pg.http.post("/v1/hooks/claude-code",
                               json={"hook_event_name": "SessionStart", "session_id": "s"})
    assert r.status_code == 200 and r.json() == {}


async def test_a_cd_inside_the_roots_keeps_the_session(api_pg: ApiRig) -> None:
    """Claude Code's cwd follows `cd`: a later call from a subdirectory is gated in
    the same session (its workspace stays the first cwd)."""
    sub = api_pg.workspace / "sub"
    sub.mkdir()
    first = event(api_pg)
    r = await api_pg.http.post("/v1/hooks/claude-code", json=first)
    assert decision(r.json())[0] == "allow"
    later = event(api_pg, session_id=first["session_id"], cwd=str(sub), tool_name="Grep",
                  tool_input={"pattern": "x"})
    r = await api_pg.http.post("/v1/hooks/claude-code", json=later)
    assert decision(r.json())[0] == "allow", r.json()
    session = await api_pg.repo.get_session(first["session_id"])
    assert session is not None and session.workspace_path == str(api_pg.workspace)
    assert {t["name"] for t in session.client_tools or []} == {"Read", "Grep"}


async def test_another_projects_workspace_cannot_be_gated_by_a_hook(api_pg: ApiRig) -> None:
    """Issue 28 (4) through the hook: the first project to register a workspace
    holds it; another project's Claude Code session on that directory is denied,
    declares nothing and runs nothing."""
    owner = event(api_pg)
    r = await api_pg.http.post("/v1/hooks/claude-code", json=owner)
    assert decision(r.json())[0] == "allow"
    beta, _ = await api_pg.repo.create_api_key("beta-agent", project="beta", roles=["agent"])
    intruder = event(api_pg)  # a fresh Claude Code session on the same cwd
    r = await api_pg.http.post("/v1/hooks/claude-code", json=intruder,
                               headers={"Authorization": f"Bearer {beta}"})
    assert r.status_code == 200, r.text
    verdict, reason = decision(r.json())
    assert verdict == "deny" and "cannot be gated" in reason, reason
    assert await api_pg.repo.get_session(intruder["session_id"]) is None
    assert await api_pg.repo.get_call(intruder["session_id"], intruder["tool_use_id"]) is None


async def audit_page(api: ApiRig, session_id: str) -> str:
    """The audit page of the session's one call, signed in with the agent key."""
    from tests.api.test_audit_pages import login

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app),
                                 base_url=api.base_url) as browser:
        assert (await login(api, browser, api.key)).status_code == 303
        listing = await browser.get("/audit", params={"session_id": session_id})
        link = re.search(r'href="(/audit/calls/\d+)"', listing.text)
        assert link, listing.text
        page = await browser.get(link.group(1))
        assert page.status_code == 200
        return page.text


def prompt_event(api: ApiRig, session_id: str, prompt_id: str, prompt: str) -> dict[str, Any]:
    return {"hook_event_name": "UserPromptSubmit", "session_id": session_id,
            "prompt_id": prompt_id, "prompt": prompt, "cwd": str(api.workspace),
            "permission_mode": "acceptEdits", "transcript_path": "t.jsonl"}


async def test_a_turns_prompt_is_recorded_and_shown_with_its_calls(api_pg: ApiRig) -> None:
    """UserPromptSubmit answers {} (the prompt proceeds) and records the prompt;
    the audit page of a call of that turn shows it and the permission mode."""
    call = event(api_pg, prompt_id=str(uuid.uuid4()), permission_mode="acceptEdits")
    sid, pid = call["session_id"], call["prompt_id"]
    submitted = prompt_event(api_pg, sid, pid, "tidy <the> notes")
    r = await api_pg.http.post("/v1/hooks/claude-code", json=submitted)
    assert r.status_code == 200 and r.json() == {}
    again = await api_pg.http.post("/v1/hooks/claude-code",
                                   json={**submitted, "prompt": "a retry says otherwise"})
    assert again.json() == {}
    r = await api_pg.http.post("/v1/hooks/claude-code", json=call)
    assert decision(r.json())[0] == "allow"
    row = await api_pg.repo.get_call(sid, call["tool_use_id"])
    assert row is not None and row.turn_id == pid
    page = await audit_page(api_pg, sid)
    assert "tidy &lt;the&gt; notes" in page and "otherwise" not in page  # first record stays
    assert 'data-testid="permission-mode">acceptEdits' in page
    assert "prompt-truncated" not in page


async def test_an_oversize_prompt_is_stored_cut_and_marked(api_pg: ApiRig) -> None:
    call = event(api_pg, prompt_id=str(uuid.uuid4()))
    limit = api_pg.app.state.settings.claude_code_prompt_max_chars
    prompt = "x" * limit + "TAIL"
    r = await api_pg.http.post("/v1/hooks/claude-code", json=prompt_event(
        api_pg, call["session_id"], call["prompt_id"], prompt))
    assert r.json() == {}
    stored = await api_pg.repo.get_prompt(call["session_id"], call["prompt_id"], "default")
    assert stored is not None and stored.prompt == "x" * limit
    assert stored.truncated and stored.prompt_chars == limit + 4
    assert decision((await api_pg.http.post("/v1/hooks/claude-code", json=call)).json())[0] \
        == "allow"
    page = await audit_page(api_pg, call["session_id"])
    assert f"the first {limit} of {limit + 4} characters" in page and "TAIL" not in page


async def test_another_projects_key_cannot_record_a_sessions_prompt(api_pg: ApiRig) -> None:
    """Only a key of the session's project speaks for its turns: another
    project's UserPromptSubmit is answered {} and is not what the audit shows."""
    call = event(api_pg, prompt_id=str(uuid.uuid4()), permission_mode="default")
    sid, pid = call["session_id"], call["prompt_id"]
    assert decision((await api_pg.http.post("/v1/hooks/claude-code", json=call)).json())[0] \
        == "allow"
    beta, _ = await api_pg.repo.create_api_key("beta-prompter", project="beta", roles=["agent"])
    r = await api_pg.http.post("/v1/hooks/claude-code",
                               json=prompt_event(api_pg, sid, pid, "beta was here"),
                               headers={"Authorization": f"Bearer {beta}"})
    assert r.status_code == 200 and r.json() == {}
    assert await api_pg.repo.get_prompt(sid, pid, "beta") is None
    stored = await api_pg.repo.get_prompt(sid, pid, "default")
    assert stored is not None and stored.prompt is None  # PreToolUse's mode only
    assert "beta was here" not in await audit_page(api_pg, sid)


async def test_prune_keeps_a_prompt_as_long_as_its_turn_has_calls(api_pg: ApiRig) -> None:
    """Audit prune drops prompts no call is filed under any more; a prompt whose
    turn still has a call stays."""
    live = event(api_pg, prompt_id=str(uuid.uuid4()))
    for body in (prompt_event(api_pg, live["session_id"], live["prompt_id"], "kept"), live):
        assert (await api_pg.http.post("/v1/hooks/claude-code", json=body)).status_code == 200
    gone = prompt_event(api_pg, str(uuid.uuid4()), str(uuid.uuid4()), "no calls")
    assert (await api_pg.http.post("/v1/hooks/claude-code", json=gone)).json() == {}
    await api_pg.repo.prune(timedelta(0), now=utcnow() + timedelta(days=1))
    assert await api_pg.repo.get_prompt(gone["session_id"], gone["prompt_id"], "default") is None
    kept = await api_pg.repo.get_prompt(live["session_id"], live["prompt_id"], "default")
    assert kept is not None and kept.prompt == "kept"


async def test_a_run_reported_after_its_call_was_cancelled_is_recorded_late(
    api_pg: ApiRig,
) -> None:
    """Claude Code was allowed and ran the call; the session was cancelled
    before its PostToolUse arrived: the run's output is recorded beside
    `cancelled` (tool.outcome_late), never dropped (issue 36, item 6)."""
    from parkgate.calls.events import make_event_id

    (api_pg.workspace / "a.txt").write_text("fine\n")
    body = event(api_pg)
    sid, cid = body["session_id"], body["tool_use_id"]
    allowed = await api_pg.http.post("/v1/hooks/claude-code", json=body)
    assert decision(allowed.json())[0] == "allow", allowed.text  # started: Claude Code runs it
    cancelled = await api_pg.http.post(f"/v1/sessions/{sid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["cancelled"] == 1, cancelled.text
    row = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", params={"wait": 20})
    assert row.json()["status"] == "cancelled", row.text
    done = await api_pg.http.post("/v1/hooks/claude-code", json={
        **body, "hook_event_name": "PostToolUse", "tool_response": "fine\n"})
    assert done.status_code == 200 and done.json() == {}
    late = await api_pg.repo.get_event(make_event_id(sid, cid, "tool.outcome_late"))
    assert late is not None and late.data["status"] == "cancelled", late
    assert late.data["result"]["content"][0]["text"] == "fine\n"
    again = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}")
    assert again.json()["status"] == "cancelled"  # the call's record stands
