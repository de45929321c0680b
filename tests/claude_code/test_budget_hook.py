"""Budgets on Claude Code's hook calls (client-executed, issue 39 part 4): the
PreToolUse past the limit parks for a person; approved, the hook allows it and
its PostToolUse charges it once; denied, it never runs and is not charged."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from parkgate.rules.budgets import UNIT
from parkgate.store.repository import Repository
from tests.api.rig import ApiRig, api_rig
from tests.claude_code.conftest import until

HOOK = "/v1/hooks/claude-code"


def pre(api: ApiRig, session: str, tid: str) -> dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": session, "cwd": str(api.workspace),
            "tool_name": "Write", "tool_use_id": tid,
            "tool_input": {"file_path": str(api.workspace / f"{tid}.txt"), "content": tid}}


async def answer(api: ApiRig, event: dict[str, Any]) -> str:
    r = await api.http.post(HOOK, json=event)
    assert r.status_code == 200, r.text
    return str(r.json()["hookSpecificOutput"]["permissionDecision"])


async def ran(api: ApiRig, event: dict[str, Any]) -> None:
    """Claude Code ran the tool: its PostToolUse reports the outcome."""
    r = await api.http.post(HOOK, json={**event, "hook_event_name": "PostToolUse",
                                        "tool_response": "written"})
    assert r.status_code == 200, r.text


async def decide_parked(api: ApiRig, session: str, tid: str, decision: str) -> None:
    async def parked() -> Any:
        row = await api.repo.get_call(session, tid)
        return row if row is not None and row.request_id else None

    row = await until(parked, 30)
    assert row.rule is not None and "budget:writes over its limit: " in row.rule
    r = await api.http.post(
        f"/v1/sessions/{session}/turns/{row.turn_id}/confirmations/{row.request_id}",
        json={"decision": decision, "reason": "ok"})
    assert r.status_code == 200, r.text


async def test_a_hook_call_past_the_limit_parks_and_is_charged_only_if_it_runs(
    dev_temporal: Client, sqlite_repo: Repository, tmp_path: Path,
) -> None:
    async with api_rig(dev_temporal, sqlite_repo, tmp_path,
                       policy={"default": {"WRITE": "auto"}}, claude_code_wait_seconds=60,
                       budgets={"writes": {"limit": 1, "tools": ["Write"]}}) as api:
        session = str(uuid.uuid4())
        first = pre(api, session, "toolu_1")
        assert await answer(api, first) == "allow"
        await ran(api, first)

        second = pre(api, session, "toolu_2")
        waiting = asyncio.create_task(answer(api, second))
        await decide_parked(api, session, "toolu_2", "allow")
        assert await waiting == "allow"
        (charge,) = await api.repo.call_charges(session, "toolu_2")
        assert charge.state == "over"  # allowed, not run yet: not counted
        await ran(api, second)

        third = pre(api, session, "toolu_3")
        waiting = asyncio.create_task(answer(api, third))
        await decide_parked(api, session, "toolu_3", "deny")
        assert await waiting == "deny"

        async def settled() -> Any:
            rows = [await api.repo.call_charges(session, f"toolu_{i}") for i in (1, 2, 3)]
            states = [r[0].state for r in rows]
            return rows if "over" not in states and "reserved" not in states else None

        rows = await until(settled, 30)
        assert [r[0].state for r in rows] == ["charged", "charged", "released"]
        assert {r[0].used_now for r in rows} == {2 * UNIT}
