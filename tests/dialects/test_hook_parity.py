"""/v1/hooks/{codex,gemini,opencode} held to the old paths' tests (the REST
calls, approval links and Claude Code's hook): another project's key or a key
without the agent role cannot gate, report on or read a session's calls;
hostile events are a 4xx that says why (never a 5xx); every decision leaves
events the audit API shows, in a chain that verifies; many hooks racing on
one call run it once. Real worker, Temporal dev server and Postgres, over the
app (ASGI)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from parkgate.calls.records import CallStatus
from parkgate.store.results import CallFilters
from tests.api.rig import ApiRig
from tests.dialects.test_hook_endpoint import approve, codex, gemini, post

AGENTS = ("codex", "gemini", "opencode")


def opencode(api: ApiRig, sid: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": "tool.execute.before", "session_id": sid,
            "call_id": f"call_{uuid.uuid4().hex[:10]}", "tool_name": "bash",
            "tool_input": {"command": "make deploy", "description": "deploy"},
            "cwd": str(api.workspace), **fields}


def event(agent: str, api: ApiRig, sid: str, **fields: Any) -> dict[str, Any]:
    """A pre-tool event that parks (a shell command) in the agent's dialect."""
    if agent in ("codex", "claude-code"):  # Claude Code's event has Codex's shape
        return codex(api, sid, tool_input={"command": "make deploy"}, **fields)
    if agent == "gemini":
        return gemini(api, sid, tool_name="run_shell_command",
                      tool_input={"command": "make deploy"}, **fields)
    return opencode(api, sid, **fields)


def after(agent: str, body: dict[str, Any], output: str) -> dict[str, Any]:
    """The agent's post-tool event for `body`'s call."""
    name = {"codex": "PostToolUse", "gemini": "AfterTool",
            "opencode": "tool.execute.after"}[agent]
    response: Any = output if agent == "codex" else (
        {"llmContent": output} if agent == "gemini" else {"output": output})
    return {**body, "hook_event_name": name, "tool_response": response}


def denied(agent: str, answer: dict[str, Any]) -> str | None:
    """The reason of a deny in the agent's answer, else None."""
    if agent in ("codex", "claude-code"):
        out = answer.get("hookSpecificOutput") or {}
        return out.get("permissionDecisionReason") if out.get(
            "permissionDecision") == "deny" else None
    if answer.get("decision") == "deny":
        return str(answer.get("reason"))
    return None


def sid_for(agent: str) -> str:
    return f"{agent[:2]}-{uuid.uuid4().hex[:8]}"


async def project_key(api: ApiRig, project: str, *roles: str) -> dict[str, str]:
    key, _ = await api.repo.create_api_key(f"{project}-{uuid.uuid4().hex[:6]}",
                                           project=project, roles=list(roles))
    return {"Authorization": f"Bearer {key}"}


# ---------------------------------------------------------------- authority
@pytest.mark.parametrize("agent", AGENTS)
async def test_another_projects_key_cannot_gate_or_report_on_a_session(
    api_pg: ApiRig, agent: str
) -> None:
    """The session is alpha's: beta's key gets a deny naming why for a new call,
    its attempt to re-use alpha's parked call is denied, and its post-tool event
    files nothing on alpha's released call."""
    sid = sid_for(agent)
    body = event(agent, api_pg, sid)
    assert denied(agent, (await post(api_pg, agent, body)).json())  # parked: waiting
    beta = await project_key(api_pg, "beta", "agent", "auditor")
    for attempt in (body, event(agent, api_pg, sid)):  # alpha's call, and a new one
        r = await api_pg.http.post(f"/v1/hooks/{agent}", json=attempt, headers=beta)
        assert r.status_code == 200, r.text
        reason = denied(agent, r.json())
        assert reason and "another project" in reason, r.json()
    cid = await approve(api_pg, sid, "gemini" if agent == "gemini" else
                        ("turn-1" if agent == "codex" else "opencode"))
    # Beta cannot pick up the approved call either, nor report its outcome.
    r = await api_pg.http.post(f"/v1/hooks/{agent}", json=body, headers=beta)
    assert denied(agent, r.json()), r.json()
    r = await api_pg.http.post(f"/v1/hooks/{agent}", json=after(agent, body, "beta's lie"),
                               headers=beta)
    assert r.status_code == 200, r.text
    # Beta's key reads nothing of the session either.
    r = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}", headers=beta)
    assert r.status_code == 404, r.text
    listed = await api_pg.http.get("/v1/tool-calls", params={"session_id": sid}, headers=beta)
    assert listed.status_code == 200 and listed.json()["items"] == [], listed.text
    # Alpha's own hook still picks it up and runs it once; its report is the outcome.
    assert denied(agent, (await post(api_pg, agent, body)).json()) is None
    assert (await post(api_pg, agent, after(agent, body, "alpha's run"))).status_code == 200
    done = (await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}",
                                  params={"wait": 20})).json()
    assert done["status"] == "succeeded", done
    text = json.dumps(done["result"])
    assert "alpha's run" in text and "beta's lie" not in text, text
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=5)
    assert [c.tool_use_id for c in calls.items] == [cid]


async def test_keys_without_the_agent_role_or_any_key_are_refused(api_pg: ApiRig) -> None:
    approver = await project_key(api_pg, "default", "approver", "auditor")
    for agent in AGENTS:
        sid = sid_for(agent)
        body = event(agent, api_pg, sid)
        for headers, status in ((approver, 403), ({"Authorization": "Bearer nope"}, 401),
                                ({"Authorization": ""}, 401)):
            r = await api_pg.http.post(f"/v1/hooks/{agent}", json=body, headers=headers)
            assert r.status_code == status, (agent, headers, r.text)
            assert r.json()["error"]["message"], r.text
        assert await api_pg.repo.get_session(sid) is None


# ------------------------------------------------------------ hostile input
def nested(depth: int) -> Any:
    out: Any = "x"
    for _ in range(depth):
        out = {"a": out}
    return out


def hostile_bodies(agent: str, api: ApiRig, sid: str) -> list[tuple[str, Any]]:
    """(what, body) pairs: each must be a 4xx naming the problem or a deny."""
    base = event(agent, api, sid)
    id_field = {"codex": "tool_use_id", "claude-code": "tool_use_id",
                "opencode": "call_id"}.get(agent)
    cases: list[tuple[str, Any]] = [
        ("array body", [base]),
        ("string body", "PreToolUse"),
        ("null body", None),
        ("number session id", {**base, "session_id": 7}),
        ("long session id", {**base, "session_id": "s" * 10_000}),
        ("slash session id", {**base, "session_id": "../../etc"}),
        ("list cwd", {**base, "cwd": ["/"]}),
        ("nul cwd", {**base, "cwd": str(api.workspace) + "\x00/x"}),
        ("relative cwd", {**base, "cwd": "../.."}),
        ("number tool name", {**base, "tool_name": 5}),
        ("empty tool name", {**base, "tool_name": ""}),
        ("huge tool name", {**base, "tool_name": "t" * 100_000}),
        ("nul tool name", {**base, "tool_name": "bash\x00"}),
        ("bidi tool name", {**base, "tool_name": "ba\u202esh"}),
        ("zero-width tool name", {**base, "tool_name": "ba\u200bsh"}),
        ("list tool input", {**base, "tool_input": ["ls"]}),
        ("deep tool input", {**base, "tool_input": nested(80)}),
        ("nul in tool input", {**base, "tool_input": {"command": "ls\x00 -la"}}),
        ("surrogate in tool input", {**base, "tool_input": {"command": "ls \ud800"}}),
        ("event name object", {**base, "hook_event_name": {"x": 1}}),
        ("unknown event", {**base, "hook_event_name": "PreToolUse\u200b"}),
    ]
    if id_field:
        cases += [("number call id", {**base, id_field: 12}),
                  ("unicode call id", {**base, id_field: "call_\u0430"}),
                  ("long call id", {**base, id_field: "c" * 201})]
    if agent in ("codex", "claude-code"):
        cases += [("object turn id", {**base, "turn_id": {"t": 1}}),
                  ("bad turn id", {**base, "turn_id": "../t y"}),
                  ("list permission mode", {**base, "permission_mode": ["x"]})]
    return cases


@pytest.mark.parametrize("agent", [*AGENTS, "claude-code"])  # the shared path's fixes
async def test_hostile_events_are_a_4xx_or_a_deny_never_a_5xx(api_pg: ApiRig,
                                                               agent: str) -> None:
    sid = sid_for(agent)
    for what, body in hostile_bodies(agent, api_pg, sid):
        content = json.dumps(body, ensure_ascii=True, allow_nan=True).encode()
        r = await api_pg.http.post(f"/v1/hooks/{agent}", content=content,
                                   headers={"Content-Type": "application/json"})
        assert r.status_code < 500, (what, r.status_code, r.text[:500])
        if r.status_code >= 400:
            assert r.json()["error"]["message"], (what, r.text)
        elif agent == "claude-code" and what == "unknown event":
            assert r.json() == {}, r.json()  # Claude Code's other events: acknowledged
        else:
            assert denied(agent, r.json()), (what, r.json())
    # Nothing ran: the session's calls are parked or refused, none released.
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=50)
    assert all(c.status in (CallStatus.PARKED, CallStatus.QUEUED, CallStatus.FAILED,
                            CallStatus.DENIED) for c in calls.items), [
        (c.tool_use_id, c.status) for c in calls.items]


@pytest.mark.parametrize("agent", AGENTS)
async def test_raw_bodies_nan_nesting_and_size(api_pg: ApiRig, agent: str) -> None:
    """Bytes the JSON parser refuses or accepts oddly: never a 5xx."""
    sid = sid_for(agent)
    base = json.dumps(event(agent, api_pg, sid))
    limit = api_pg.rig.settings.max_request_bytes
    raws: list[tuple[str, bytes, tuple[int, ...]]] = [
        ("not json", b"{not json", (400,)),
        ("empty", b"", (400,)),
        ("invalid utf-8", b'{"session_id": "\xff\xfe"}', (400, 422)),
        ("nan", base.replace('"make deploy"', "NaN").encode(), (400, 422)),
        ("infinity", base.replace('"make deploy"', "-Infinity").encode(), (400, 422)),
        ("deep array", ("[" * 100_000 + "]" * 100_000).encode(), (400, 413, 422)),
        ("deep in input", base.replace('"make deploy"', "[" * 50_000 + "]" * 50_000).encode(),
         (400, 413, 422)),
        ("oversize", base.replace('"make deploy"', '"' + "a" * (limit + 10) + '"').encode(),
         (413,)),
        ("duplicate keys", (base[:-1] + ', "session_id": 5}').encode(), (422,)),
    ]
    for what, raw, statuses in raws:
        r = await api_pg.http.post(f"/v1/hooks/{agent}", content=raw,
                                   headers={"Content-Type": "application/json"})
        assert r.status_code in statuses, (what, r.status_code, r.text[:300])
        assert r.json()["error"]["message"], (what, r.text[:300])
    assert (await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=5)).items == []


# -------------------------------------------------------------------- audit
@pytest.mark.parametrize("agent", AGENTS)
async def test_each_decision_and_run_is_in_the_audit_and_the_chain_verifies(
    api_pg: ApiRig, agent: str
) -> None:
    """A parked call approved, run and reported; another denied: the audit API
    lists both with who decided, their events, and the session's chain verifies."""
    sid = sid_for(agent)
    ran = event(agent, api_pg, sid)
    await post(api_pg, agent, ran)
    turn = "turn-1" if agent == "codex" else agent
    cid = await approve(api_pg, sid, turn)
    assert denied(agent, (await post(api_pg, agent, ran)).json()) is None
    r = await post(api_pg, agent, after(agent, ran, "deployed"))
    assert r.status_code == 200, r.text
    done = (await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}",
                                  params={"wait": 20})).json()
    assert done["status"] == "succeeded", done

    refused = event(agent, api_pg, sid)
    refused["tool_input"] = {**refused["tool_input"], "command": "rm -rf /srv"}
    refused.pop("tool_use_id", None)
    refused.pop("call_id", None)
    if agent != "gemini":
        refused[{"codex": "tool_use_id"}.get(agent, "call_id")] = f"call_{uuid.uuid4().hex[:8]}"
    await post(api_pg, agent, refused)
    parked = await api_pg.repo.list_calls(
        CallFilters(session_id=sid, status=CallStatus.PARKED), limit=5)
    (other,) = parked.items
    request = await api_pg.wait_parked(sid, other.tool_use_id)
    r = await api_pg.http.post(f"/v1/sessions/{sid}/turns/{turn}/confirmations/"
                               f"{request['request_id']}",
                               json={"decision": "deny", "reason": "not in prod"})
    assert r.status_code == 200, r.text
    if agent != "gemini":  # with no call id, Gemini's retry after a denial is a new call
        reason = denied(agent, (await post(api_pg, agent, refused)).json())
        assert reason and "not in prod" in reason

    ended = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{other.tool_use_id}",
                                  params={"wait": 20})
    assert ended.json()["status"] == "denied", ended.text
    audit = await api_pg.http.get("/v1/tool-calls", params={"session_id": sid})
    assert audit.status_code == 200, audit.text
    rows = {c["tool_use_id"]: c for c in audit.json()["items"]}
    assert rows[cid]["status"] == "succeeded" and rows[other.tool_use_id]["status"] == "denied"
    ran_events = await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}/events")
    types = [e["type"] for e in ran_events.json()["events"]]
    for kind in ("tool.confirmation_requested", "tool.confirmation_resolved",
                 "tool.released", "tool.claim_started", "tool.outcome_reported"):
        assert types.count(kind) == 1, (kind, types)
    denied_events = await api_pg.http.get(
        f"/v1/sessions/{sid}/tool-calls/{other.tool_use_id}/events")
    dtypes = [e["type"] for e in denied_events.json()["events"]]
    assert "tool.confirmation_requested" in dtypes and "tool.claimed" not in dtypes, dtypes
    report = await api_pg.repo.verify_chain(sid)
    assert report.ok and report.problems == [], report


# -------------------------------------------------------------- concurrency
@pytest.mark.parametrize("agent", AGENTS)
async def test_eight_hooks_racing_on_one_approved_call_run_it_once(
    api_pg: ApiRig, agent: str
) -> None:
    """The same pre-tool event eight times at once, first before any call
    exists and again once approved: one call, one allow, one started claim.
    (Gemini CLI sends no call id: eight events at once are eight calls to it,
    so its first event goes alone.)"""
    sid = sid_for(agent)
    body = event(agent, api_pg, sid)
    first = await asyncio.gather(*(post(api_pg, agent, body)
                                   for _ in range(1 if agent == "gemini" else 8)))
    assert all(r.status_code == 200 and denied(agent, r.json()) for r in first), [
        r.text for r in first]
    calls = await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=20)
    assert len(calls.items) == 1, [c.tool_use_id for c in calls.items]
    cid = await approve(api_pg, sid, "turn-1" if agent == "codex" else agent)
    answers = await asyncio.gather(*(post(api_pg, agent, body) for _ in range(8)))
    allowed = [a.json() for a in answers if denied(agent, a.json()) is None]
    assert len(allowed) == 1, [a.json() for a in answers]
    events = (await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}/events")).json()
    types = [e["type"] for e in events["events"]]
    assert types.count("tool.claim_started") == 1 and types.count("tool.released") == 1, types
    assert len((await api_pg.repo.list_calls(CallFilters(session_id=sid), limit=20)).items) == 1



@pytest.mark.parametrize("agent", AGENTS)
async def test_hostile_outcomes_and_prompts_are_stored_or_refused_never_a_5xx(
    api_pg: ApiRig, agent: str
) -> None:
    """Post-tool events for an approved call with what Postgres refuses (NUL),
    what is no text (a lone surrogate), a huge and a deep output; prompts with
    the same: a 4xx or an acknowledgement, never a 5xx; the call's outcome is
    filed once and its chain verifies."""
    sid = sid_for(agent)
    body = event(agent, api_pg, sid)
    await post(api_pg, agent, body)
    cid = await approve(api_pg, sid, "turn-1" if agent == "codex" else agent)
    assert denied(agent, (await post(api_pg, agent, body)).json()) is None
    limit = api_pg.rig.settings.max_request_bytes
    outputs: list[Any] = ["nul \x00 byte", "lone \ud800", nested(80), "o" * (limit // 2),
                          "o" * (limit + 10), "fine"]
    for output in outputs:
        raw = json.dumps(after(agent, body, output), ensure_ascii=True).encode()
        r = await api_pg.http.post(f"/v1/hooks/{agent}", content=raw,
                                   headers={"Content-Type": "application/json"})
        assert r.status_code < 500, (str(output)[:40], r.status_code, r.text[:300])
    done = (await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}",
                                  params={"wait": 20})).json()
    assert done["status"] == "succeeded", done
    events = (await api_pg.http.get(f"/v1/sessions/{sid}/tool-calls/{cid}/events")).json()
    assert [e["type"] for e in events["events"]].count("tool.outcome_reported") == 1
    if agent != "opencode":  # opencode's plugin sends no prompt event
        name = {"codex": "UserPromptSubmit", "gemini": "BeforeAgent"}[agent]
        for prompt in ("nul \x00", "lone \ud800", "p" * (limit // 2), {"x": 1}):
            raw = json.dumps({"hook_event_name": name, "session_id": sid,
                              "cwd": str(api_pg.workspace), "prompt": prompt,
                              "turn_id": "turn-2"}, ensure_ascii=True).encode()
            r = await api_pg.http.post(f"/v1/hooks/{agent}", content=raw,
                                       headers={"Content-Type": "application/json"})
            assert r.status_code < 500, (str(prompt)[:40], r.status_code, r.text[:300])
    assert (await api_pg.repo.verify_chain(sid)).ok
